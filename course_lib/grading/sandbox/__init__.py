"""Running a submission's code where it can do no harm, and asking it questions.

:mod:`.sandbox` builds the bubblewrap container, :mod:`.cgroups` caps its processes and memory,
:mod:`.packages` says which installed packages it shows, :mod:`.libcopy` builds the ``course_lib`` it imports
(the graded answers withheld), :mod:`.scratch` names the grader's scratch folders, :mod:`.executor` asks the
sandbox one request at a time and keeps the clocks, :mod:`.sandbox_main` answers inside it (and decides nothing),
and :mod:`.codec` carries data across (arrays as ``.npz``, structure as JSON, no pickles).

This ``__init__`` imports nothing: the sandbox's copy of the library carries only ``sandbox_main`` and ``codec``.
"""
