"""A run's bound and the next step to try: proposals with the gain each predicts, tried as one
sweep of ``hpml.train`` beside the original (``python -m hpml.advise RUN_ID [--try]``). Reads
what the report reads, launches what train launches; nothing below imports it."""
