"""`python -m tideline.verify --pipeline NAME [--tables a,b] [--repair]`"""
import sys

from tideline.verify.compare import main

sys.exit(main())
