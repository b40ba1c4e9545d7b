"""hpml's benchmark suite (``python -m hpml.bench``, ``make bench``): each case measures its
variants side by side in one process and reports ratios (:mod:`hpml.bench.harness`); one module
per case, the registry and CLI in ``__main__``."""
