import sys

from ngramspec.server.launch import main

sys.exit(main())
