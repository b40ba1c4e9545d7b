"""What the GPU kit holds and what the GPU machine has: the package lists, in one place.

Standard library only: ``hpml.gpu.kit`` runs under a bare ``python3``.
"""

from __future__ import annotations

import re

# The kit, in one place: what hpml imports (directly or through MLflow's SQLite tracking store)
# and the GPU machine lacks, pinned inside the ranges that hpml and these packages declare (so
# the registry's newer releases do not move it). The smallest set ``check`` passes with; what
# MLflow declares but a tracking run never imports (gitpython, uvicorn, python-dotenv,
# google-auth, mlflow's server UI) stays out. Packages the machine
# already has (anyio, zipp, click, cloudpickle, protobuf, ...) stay out too. Not in it, so not
# on that machine: optuna (hparams_search=), torchao (quant=torchao_int8, static int8 through
# PT2E), the joblib and submitit launchers, the MLflow server.
KIT: tuple[tuple[str, str], ...] = (
    ("mlflow-skinny", "3.17.2"),  # the client and the SQLite store; the full mlflow adds the UI
    ("SQLAlchemy", "2.1.9"),
    ("alembic", "1.20.1"),
    ("Mako", "1.4.3"),
    ("sqlparse", "0.6.1"),
    ("cryptography", "50.0.2"),  # the store imports cryptography.fernet
    ("cffi", "2.1.1"),  # its compiled backend only: pycparser (cdef parsing) is not needed
    ("databricks-sdk", "0.162.0"),
    ("fastapi", "0.165.0"),
    ("starlette", "1.10.0"),
    ("pydantic", "2.14.4"),
    ("pydantic_core", "2.50.5"),
    ("annotated-types", "0.8.0"),
    ("typing-inspection", "0.4.5"),
    ("opentelemetry-api", "1.45.2"),
    ("opentelemetry-sdk", "1.45.2"),
    ("opentelemetry-proto", "1.45.2"),
    ("opentelemetry-semantic-conventions", "0.66b2"),
    ("cachetools", "7.3.3"),
    ("importlib_metadata", "9.1.0"),
    ("hydra-core", "1.3.8"),
    ("omegaconf", "2.3.1"),
    ("antlr4-python3-runtime", "4.9.3"),
    ("torch-pruning", "1.6.1"),  # prune=: imported only then, so check's run does without it
)
# On the registry as a source distribution only: built here into a py3-none-any wheel.
BUILT_HERE = frozenset({"antlr4-python3-runtime"})
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

# The GPU machine's own packages that hpml (or the kit) may import, for the check's virtual
# environment; pinned where the machine's version is known and has a wheel for the Python that
# runs the check (numpy's has not, so pip chooses it).
HOST_BASE: tuple[str, ...] = (
    "torch==2.11.0",
    "torchvision==0.26.0",
    "lightning==2.6.6",
    "pytorch-lightning==2.6.6",
    "torchmetrics==1.9.0",
    "numpy",
    "scipy",
    "pandas",
    "matplotlib",
    "psutil",
    "pyyaml",
    "filelock",
    "tqdm",
    "pillow",
    "requests",
    "urllib3",
    "packaging",
    "jinja2",
    "protobuf",
    "rich",
    "click",
    "cloudpickle",
    "anyio",
    "zipp",
    "typing-extensions",
    "annotated-doc",
    "nvidia-ml-py",
    "python-dateutil==2.9.0.post0",  # 4.0 pulls tzdata, which the machine lacks
)
# Every package on the GPU machine (its image, as docs/gpu.md says): the check's environment may
# hold nothing else, or it would prove the kit complete for a machine that does not exist.
_HOST_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf
psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp
"""
HOST_PACKAGES = frozenset(_HOST_PACKAGES.split())


def normalize(name: str) -> str:
    """A distribution's name as the registry compares it (PEP 503): ``SQLAlchemy`` is
    ``sqlalchemy``, ``pydantic_core`` is ``pydantic-core``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """The kit as pip requirements, ``name==version``."""
    return [f"{name}=={version}" for name, version in KIT]
