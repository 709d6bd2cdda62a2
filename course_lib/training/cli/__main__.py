"""``python -m course_lib.training.cli`` (and ``torchrun -m course_lib.training.cli``): the ``course-train`` command."""

import sys

from course_lib.training.cli.cli import main

if __name__ == "__main__":
    sys.exit(main())
