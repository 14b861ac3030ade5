"""`python -m tideline.verify --pipeline NAME [--tables a,b] [--repair]`"""
import sys

from tideline.verify.command import main

sys.exit(main())
