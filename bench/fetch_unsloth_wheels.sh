#!/usr/bin/env bash
# Download, into four ignored folders, the wheels Unsloth's recipe (bench/unsloth_recipe.py) needs on the GPU machine
# for Python 3.12 beside the image's torch, transformers, peft and accelerate: Unsloth 2026.10.9 asks for trl <= 1.15
# and datasets < 5 (the project pins trl 1.16 and datasets 5), so it gets a site of its own there, which holds all
# that the side by side's three scripts need beyond the image. A device call carries at most 64 MiB with the
# repository (29 MiB of it), so each folder stays under 30 MiB: bitsandbytes' 43 MB wheel goes in two pieces
# (.whl-uns-a with the small wheels, .whl-uns-b), Unsloth alone (.whl-uns-c), the rest (.whl-uns-d);
# bench/unsloth_h200.sh gathers them, one call each, the machine kept warm, and joins the pieces.
set -euo pipefail
rm -rf .whl-uns-a .whl-uns-b .whl-uns-c .whl-uns-d  # a fresh set: the pieces are cut from a whole wheel
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
  msgspec==0.23.0 json5==0.17.3 structlog==26.1.0 cut-cross-entropy==25.1.1 dill==0.4.1 multiprocess==0.70.19 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 nest-asyncio==1.6.0
get .whl-uns-c unsloth==2026.10.9
get .whl-uns-d unsloth-zoo==2026.10.9 torchao==0.18.0 trl==1.15.0 datasets==4.8.5 \
  diffusers==0.42.1 hf-transfer==0.1.9 xformers==0.0.35
# the bitsandbytes wheel in two pieces, the second in its own folder
mkdir -p .whl-uns-b
(cd .whl-uns-a && split -b 22000000 bitsandbytes-0.50.2-*.whl bitsandbytes.part. && rm bitsandbytes-0.50.2-*.whl \
  && mv bitsandbytes.part.ab ../.whl-uns-b/)
du -sh .whl-uns-a .whl-uns-b .whl-uns-c .whl-uns-d
