import sys

from amlgpu.cli import main

sys.exit(main())
