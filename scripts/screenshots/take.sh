#!/bin/bash
# Screenshots of the notebooks opened in JupyterLab (docs/screenshots/), taken with headless Chromium.
# Needs: the venv with the notebooks extra, Debian's chromium (/usr/bin/chromium), node with playwright-core
# (npm install playwright-core in this folder). Loopback only: JupyterLab listens on 127.0.0.1.
# usage: scripts/screenshots/take.sh [PYTHON_BIN_DIR]   (run from the repository root)
set -euo pipefail
BIN=${1:-$(dirname "$(command -v python)")}
REPO=$PWD HERE=$PWD/scripts/screenshots OUT=$PWD/docs/screenshots PORT=8898 TOKEN=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
TMP=$(mktemp -d)
mkdir -p "$TMP/settings/@jupyterlab/apputils-extension" "$TMP/settings/@jupyterlab/notebook-extension" \
         "$TMP/settings/@jupyterlab/docmanager-extension" "$TMP/ws" "$OUT"
echo '{"fetchNews": "false", "checkForUpdates": false}' > "$TMP/settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
echo '{"windowingMode": "none"}' > "$TMP/settings/@jupyterlab/notebook-extension/tracker.jupyterlab-settings"  # render every cell
echo '{"autosave": false}' > "$TMP/settings/@jupyterlab/docmanager-extension/plugin.jupyterlab-settings"  # never write the notebooks
env -u MPLBACKEND PYTHONPATH="$REPO" JUPYTERLAB_SETTINGS_DIR="$TMP/settings" JUPYTERLAB_WORKSPACES_DIR="$TMP/ws" \
  "$BIN/jupyter" lab --allow-root --no-browser --ip 127.0.0.1 --port $PORT --IdentityProvider.token="$TOKEN" \
  --ServerApp.root_dir="$REPO" > "$TMP/lab.log" 2>&1 &
LAB=$!
trap 'kill $LAB; rm -rf "$TMP"' EXIT
sleep 10
# the explorer's picture first: notebook 04 embeds it from docs/screenshots/
# (headless Chromium sometimes captures the plot before painting it: retry until it is painted to its x axis)
for try in 1 2 3 4 5 6; do
  node "$HERE/explorer.js" $PORT "$TOKEN" "$TMP/04_explorer_after_run.png"
  "$BIN/python" - "$TMP/04_explorer_after_run.png" <<'PY' && break
import sys
import numpy as np
from PIL import Image
a = np.asarray(Image.open(sys.argv[1]).convert("L")).astype(int)
# painted to the bottom: the plot's x axis and tick labels (dark pixels) in the lowest fifth, under the plot
sys.exit(0 if (a[int(a.shape[0] * 0.8):, 60:700] < 100).sum() > 300 else 1)
PY
  echo "explorer capture $try: plot not painted, again"
done
"$BIN/python" -c "from PIL import Image; import sys; Image.open(sys.argv[1]).convert('RGB').quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(sys.argv[2], optimize=True)" "$TMP/04_explorer_after_run.png" "$OUT/04_explorer_after_run.png"
for nb in notebooks/*.ipynb; do
  node "$HERE/shoot.js" $PORT "$TOKEN" "$TMP" "$(basename "$nb")"
done
# 256-colour PNGs: a third of the size, the text stays sharp
"$BIN/python" - "$TMP" "$OUT" <<'PY'
import sys
from pathlib import Path
from PIL import Image
for f in Path(sys.argv[1]).glob("*.png"):
    Image.open(f).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(Path(sys.argv[2]) / f.name, optimize=True)
    print("wrote", Path(sys.argv[2]) / f.name)
PY
git -C "$REPO" status --short notebooks  # must print nothing: opening the notebooks changed no file
