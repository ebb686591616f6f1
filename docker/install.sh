#!/bin/sh
# The image's install step (Dockerfile), also run by tests/deploy/test_image.py in a clean virtualenv:
# shadowguard and its runtime dependencies only (no dev extra), pinned by constraints.txt.
#   sh docker/install.sh TARGET_VENV [SOURCE_TREE]
set -eu
target="$1"
src="${2:-.}"
python3 -m venv "$target"
"$target/bin/pip" install --quiet --upgrade pip
"$target/bin/pip" install --quiet -c "$src/constraints.txt" "$src"
"$target/bin/shadowguard" --help > /dev/null
