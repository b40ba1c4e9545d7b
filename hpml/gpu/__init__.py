"""hpml on a GPU machine that has torch and Lightning but not hpml's other dependencies.

``hpml.gpu.kit`` builds here the wheels such a machine lacks and installs them there without an
index; ``hpml.gpu.check`` runs hpml's CUDA paths, each part under a time budget. Both import
only the standard library at module level, so they run under a bare ``python3``.
"""
