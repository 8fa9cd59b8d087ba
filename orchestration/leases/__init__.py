"""Fenced leases: who serves a worker group (:mod:`.claims`) and keeping one alive
(:mod:`.keeper`, renewing in the background while its holder lives)."""
