"""hpml on a GPU machine that has torch and Lightning but not hpml's other dependencies.

``hpml.gpu.kit`` builds, here, the wheels such a machine lacks (a few tens of MiB that travel
with the working tree) and installs them there with the machine's own ``python3 -m pip``, no
index needed; ``hpml.gpu.check`` installs them and runs hpml's CUDA paths, each part under a
time budget. Both import only the standard library at module level, so they run under a bare
``python3``.
"""
