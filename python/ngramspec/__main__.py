import sys

from ngramspec.cli.main import main

sys.exit(main())
