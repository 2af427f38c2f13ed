"""python -m bpetok_hf export MODEL --format hf -o DIR."""

import sys

from bpetok_hf.cli import main

sys.exit(main())
