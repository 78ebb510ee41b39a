import sys

from hookstream.cli import main

sys.exit(main())
