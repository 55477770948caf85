#!/usr/bin/env bash
# Download, into an ignored folder (default .whl/), the wheels the GPU machine lacks for Python 3.12:
# the packages of constraints.txt that its image lacks (trl, datasets, hydra-core, omegaconf, optuna, mlflow, ...);
# torch, triton, nvidia-*, transformers, peft, accelerate, numpy, pyarrow, ... stay the image's own.
# antlr4-python3-runtime (needed by hydra-core) exists only as an sdist: its wheel is built here.
# On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
dest="${1:-.whl}"
mkdir -p "$dest"
python3 -m pip wheel --quiet --no-deps -w "$dest" antlr4-python3-runtime==4.9.3
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
# The image's packages (KINDS.md, "Python packages already there"), kept as they are there.
image="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless
optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
# Everything in constraints.txt (the CPU stack's exact versions) that the image lacks, one wheel each, no resolver:
# resolving for another platform would pull a CUDA torch of several GB.
wanted=()
while IFS= read -r line; do
  name="$(echo "${line%%==*}" | tr '_' '-' | tr 'A-Z' 'a-z')"
  # the browser and dashboard of the slow tests, the linter: not for the GPU runs
  case "$name" in ""|\#*|antlr4-python3-runtime|torch|triton|nvidia-*|cuda-*|ruff|playwright|optuna-dashboard|greenlet|bottle|pyee) continue;; esac
  # the notebook's kernel and client, the PostgreSQL driver: not for the GPU runs either (and the wheels must fit a call)
  case "$name" in ipykernel|ipython|ipython-pygments-lexers|ipywidgets|jupyter-*|jupyterlab-widgets|nbclient|nbformat|\
    debugpy|pyzmq|jedi|parso|pexpect|ptyprocess|prompt-toolkit|pure-eval|stack-data|asttokens|executing|\
    matplotlib-inline|comm|traitlets|widgetsnbextension|fastjsonschema|jsonschema|jsonschema-specifications|\
    referencing|rpds-py|tornado|nest-asyncio2|psycopg|psycopg-binary|decorator|wcwidth) continue;; esac
  # the documentation site's builder: not for the GPU runs either
  case "$name" in babel|backrefs|ghp-import|griffelib|mergedeep|mkdocs|mkdocs-*|mkdocstrings|mkdocstrings-*|paginate|\
    pymdown-extensions|pyyaml-env-tag|watchdog) continue;; esac
  skip=0
  for kept in $image; do [ "$name" = "$kept" ] && skip=1 && break; done
  [ $skip = 1 ] || wanted+=("$line")
done < "$(dirname "$0")/../constraints.txt"
# GPU-only extras the CPU stack does not install: Liger's Triton kernels (train.liger_kernel=true; pure Python).
wanted+=("liger-kernel==0.8.5")
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "${wanted[@]}"
for wheel in "$dest"/*.whl; do
  name="$(basename "$wheel" | cut -d- -f1 | tr '_' '-' | tr 'A-Z' 'a-z')"
  case "$name" in nvidia-*|cuda-*) rm -f "$wheel"; continue;; esac
  for kept in $image; do
    if [ "$name" = "$kept" ]; then rm -f "$wheel"; break; fi
  done
done
# MLflow's web UI (7 of the wheel's 11 MB): the GPU runs track, the UI runs here (and the wheels must fit a call)
python3 - "$dest"/mlflow-[0-9]*.whl <<'PY'
import os, sys, zipfile
for path in sys.argv[1:]:
    ui = "mlflow/server/js/"
    with zipfile.ZipFile(path) as src:
        if not any(n.startswith(ui) for n in src.namelist()):
            continue
        with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                if info.filename.startswith(ui):
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    data = b"".join(l for l in data.splitlines(True) if not l.startswith(ui.encode()))
                dst.writestr(info, data)
    os.replace(path + ".tmp", path)
PY
echo "$(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest"
