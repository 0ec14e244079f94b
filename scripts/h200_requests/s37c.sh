#!/bin/bash
# issue 16, the thirty-seventh session's third call (main at .gitsha; after the 9 staging calls; < 9.5 min): s37a.sh's
# bench at 1024 and 4096 and every CUDA test again, at gate|up's new default tile (TILED_GATE_UP = (16, 8, 0))
exec bash scripts/h200_requests/s37a.sh
