#!/usr/bin/env bash
# Installs oxiwork with JupyterLab on a fresh Debian machine (Python 3.10+, Node 20) and
# opens the workbench notebook: the README's run command. Extra arguments go to jupyter lab.
set -euo pipefail
cd "$(dirname "$0")/.."

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
.venv/bin/python -m pip install -q -e ".[lab]"

# JupyterLab refuses to run as root unless told to (containers and CI machines run as root).
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
exec .venv/bin/jupyter lab "${extra[@]}" "$@" notebooks/workbench.ipynb
