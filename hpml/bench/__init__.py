"""hpml's benchmark suite (``python -m hpml.bench``, ``make bench``).

Each case measures its variants side by side in one process and reports ratios, because on a
shared machine absolute times from separate runs are not comparable. ``harness`` holds the
generic rounds and statistics; one module per case (``overhead``); the registry and CLI live in
``__main__``.
"""
