#!/bin/sh
# run_host.sh - the Python binding's host tests (no GPU; torch optional).
#
# Uses pytest from $PYTHON (default python3) if it has it; else makes a
# virtual environment in $BUILD/pyenv once (seeing the system's packages,
# torch included if installed) and installs pytest there from PyPI, saying
# so. Called by `make test` with LOOM_LIBRARY (the libloom just built),
# LOOM_TEST_CFLAGS (the Makefile's include folders) and CC.
set -e
py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "loom: $py not found: the Python binding's tests need Python >= 3.9" >&2; exit 1; }
if ! "$py" -c 'import pytest' 2>/dev/null; then
  env=${BUILD:-build}/pyenv
  if ! "$env/bin/python" -c 'import pytest' 2>/dev/null; then
    echo "loom: pytest is not installed for $py; installing it into $env (python -m venv, pip install pytest from PyPI)"
    if ! { "$py" -m venv --system-site-packages "$env" && "$env/bin/python" -m pip install --quiet --disable-pip-version-check pytest; }; then
      echo "loom: could not install pytest into $env; install it yourself ($py -m pip install pytest) and rerun" >&2
      exit 1
    fi
  fi
  py=$env/bin/python
fi
exec "$py" -m pytest -q -p no:cacheprovider -rs tests/python --ignore=tests/python/gpu "$@"
