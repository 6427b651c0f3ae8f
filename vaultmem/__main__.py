import sys

from vaultmem.cli.app import main

sys.exit(main())
