"""``python -m course_lib.trainer`` (and ``torchrun -m course_lib.trainer``): the ``course-train`` command."""

import sys

from course_lib.trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
