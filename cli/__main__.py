"""``python -m wgstore.cli``: the same as the ``wgstore`` command."""

from wgstore.cli.app import main

main()
