"""The class edition: what students receive for a graded class, with no graded exercise's answer in it.

- :mod:`~course_lib.edition.answers`: where the answers are (every graded part of the library);
- :mod:`~course_lib.edition.strip`: replacing parts of a module's source (one implementation, used by the
  edition and by the grader's sandbox copy, :mod:`course_lib.grading.sandbox.libcopy`);
- :mod:`~course_lib.edition.backed`: PyTorch's own modules behind the course's signatures;
- :mod:`~course_lib.edition.record`: the calls the lessons make, recorded so that their outputs can ship;
- :mod:`~course_lib.edition.stored`: the edition's checks over stored data (shipped in the edition);
- :mod:`~course_lib.edition.build` and :mod:`~course_lib.edition.cli` (``course-class-edition``): the build;
- :mod:`~course_lib.edition.install`: where the course is published, and the notebooks' install cell (Colab).

Nothing here is imported by ``import course_lib``. See ``docs/instructors.md`` ("The class edition").
"""
