#!/usr/bin/env bash
# Download, into two ignored folders, the wheels Unsloth's recipe (bench/unsloth_recipe.py) needs on the GPU machine
# for Python 3.12 beside the image's torch, transformers, peft and accelerate: Unsloth 2026.10.9 asks for trl <= 1.15
# and datasets < 5 (the project pins trl 1.16 and datasets 5), so it gets a site of its own there. Two folders of
# under 50 MiB each, since a device call carries at most 64 MiB: .whl-uns-a (bitsandbytes and the small ones),
# .whl-uns-b (Unsloth, its zoo, torchao, the rest). On the GPU machine, one call each, the machine kept warm:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/uns-site .whl-uns-a/*.whl   # call 1
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/uns-site .whl-uns-b/*.whl   # call 2
set -euo pipefail
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
get() {  # get FOLDER PACKAGE...
  local dest=$1
  shift
  mkdir -p "$dest"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 -d "$dest" "$@"
}
get .whl-uns-a bitsandbytes==0.50.2 tyro==1.0.17 docstring-parser==0.18.0 shtab==1.13.0 typeguard==4.6.1 \
  msgspec==0.23.0 json5==0.17.3 structlog==26.1.0 cut-cross-entropy==25.1.1
get .whl-uns-b unsloth==2026.10.9 unsloth-zoo==2026.10.9 torchao==0.18.0 trl==1.15.0 datasets==4.8.5 \
  diffusers==0.42.1 hf-transfer==0.1.9 xformers==0.0.35
du -sh .whl-uns-a .whl-uns-b
