#!/bin/sh
# Runs on a board booted from an export of the set's image, with the set copied to /opt/set:
# installs the set the way any board would (pip, the set's lock, no index, no compiler) into a
# fresh environment that sees none of the image's own packages, then groups a DataFrame.
set -eu
python3 -m venv --without-pip /tmp/board
python3 -m pip --python /tmp/board/bin/python install -q --no-index --find-links /opt/set \
    --only-binary :all: --require-hashes -r /opt/set/requirements.txt
cd /tmp
/tmp/board/bin/python -c '
import platform
import numpy as np
import pandas as pd
df = pd.DataFrame({"board": ["rpi3", "pynq-z1", "rpi3", "pynq-z1", "rpi3"],
                   "seconds": [1.5, 2.0, 2.5, 4.0, 3.0]})
print("board:", platform.machine(), "pandas", pd.__version__, "numpy", np.__version__,
      "from", pd.__file__.rsplit("/", 3)[0])
print(df.groupby("board")["seconds"].agg(["count", "sum", "mean"]).to_string())
'
