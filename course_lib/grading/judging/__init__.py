"""Deciding, in the grader's process: what a submission may run, and what each exercise scores.

:mod:`.parsing` parses a cell once within a bound, :mod:`.policy` is the static policy (an early friendly
message, never the defence), :mod:`.results` reads the sandbox's answers as untrusted data, :mod:`.judge`
decides each exercise's status, and :mod:`.scoring` turns statuses into points.
"""
