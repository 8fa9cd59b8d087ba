"""What a train function needs besides its context: to be found by import path
(:mod:`.loading`) and to have its reports written (:mod:`.report_writer`).

The context itself, :func:`~wgstore.orchestration.train_context.get_context` and
:func:`~wgstore.orchestration.train_context.report`, stays at
``wgstore.orchestration.train_context``: train functions pickled by earlier versions name it.
"""
