"""hpml on a GPU machine that has torch and Lightning but not hpml's other dependencies.

``hpml.gpu.kit`` builds, here, the wheels such a machine lacks (a few tens of MiB that travel
with the working tree) and installs them there with the machine's own ``python3 -m pip``, no
index needed. It imports only the standard library, so it runs under a bare ``python3``.
"""
