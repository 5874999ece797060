import sys

from ngramspec.server.cli import main

sys.exit(main())
