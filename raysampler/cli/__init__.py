"""`raysampler` command line: serve the REST API, submit runs and look at them.

    raysampler serve [--host 127.0.0.1] [--port 8000] [--data-dir ~/.raysampler] [--ray-address ADDR]
    raysampler submit spec.json|spec.yaml [--wait]      raysampler status [ID|latest]
    raysampler draws ID [--follow] [--start K]           raysampler cancel ID | resume ID | delete ID
    raysampler summary ID                                raysampler upload FILE [--y-column y] [--x-columns a,b]
    raysampler loo ID [--draws N|all] [--moment-match]   raysampler compare ID1 ID2 [...] [--draws N|all] [--method M]
    raysampler evaluate ID --dataset-id DS | --data REF.json    raysampler predict ID --dataset-id DS [--kind K]
    raysampler demo                                      raysampler audit [--tenant T] [--since 1h] [--action A]

Client commands take --url / $RAYSAMPLER_URL and --api-key / $RAYSAMPLER_API_KEY (else the key `serve` wrote to
<data dir>/api_keys); every command takes --format table|json. Server flags have RAYSAMPLER_* equivalents.

Modules: `parser` (the commands and `main`), `serve` (serve, audit, demo), `runs`, `checks`, `output` (what they
share).
"""

from __future__ import annotations

from .parser import build_parser, main
from .serve import KEYS_FILE, ensure_keys

__all__ = ["KEYS_FILE", "build_parser", "ensure_keys", "main"]
