import sys

from vaultmem.cli import main

sys.exit(main())
