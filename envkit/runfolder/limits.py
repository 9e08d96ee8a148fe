"""The caps of what a run folder holds, one place for the writer (record/code.py) and the reader
(archive.py): untracked files are copied into code/<role>-untracked.tar only when they are
source-sized, and an archive is read back only within the same caps."""

UNTRACKED_FILE_MAX = 1 << 20  # one file
UNTRACKED_TOTAL_MAX = 16 << 20  # all of them
UNTRACKED_COUNT_MAX = 2000
