"""The class's records: what the grader says about a submission and where it is kept.

:mod:`.report_types` holds the report's data (an exercise's line, a submission's report), :mod:`.report`
writes it as JSON and Markdown, :mod:`.gradebook` keeps the class's SQLite gradebook (never rewritten),
:mod:`.roster` says whose a file is, :mod:`.exports` writes the CSV and LMS files, and :mod:`.handback` the
feedback for students.
"""
