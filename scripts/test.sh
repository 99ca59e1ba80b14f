#!/usr/bin/env bash
# Installs everything oxiwork's tests need on a fresh Debian machine (Python 3.10+, Node 20)
# and runs the whole test suite: lint, JS unit tests, Python tests (browser tests included,
# GPU tests skipped without a GPU). This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's Chromium drives the widget's browser tests (never a downloaded browser).
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# Debian's graphviz gives the `dot` binary that oxiwork's SVG renders (to_svg, the notebook
# display, the HTML report) call.
if ! command -v dot >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The editable install builds the widget bundle (widget_js -> oxiwork/static) with npm.
.venv/bin/python -m pip install -q -e ".[test]"

echo "== lint"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The layer order of pyproject.toml's [tool.importlinter] contract (no upward imports).
.venv/bin/lint-imports --no-logo
# The TypeScript side: formatted (prettier) and type-checked (messages.ts types the boundary).
(cd widget_js && npm ci --no-audit --no-fund --loglevel=error && npx prettier --check src && npm run typecheck)

echo "== JS unit tests"
(cd widget_js && npm test)

echo "== Python tests"
# Two workers (pytest-xdist; CI machines have 2 cores); --dist loadgroup keeps the tests that
# share one JupyterLab on one worker; the 25 slowest tests are listed to watch the budget.
.venv/bin/python -m pytest -n 2 --dist loadgroup --durations=25 "$@"
