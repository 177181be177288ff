"""The base of every error caused by bad input (files, specs, options).

The CLI prints such errors as one line, without a traceback, and exits with status 2. Their
messages name the file and the line, frame, byte offset or key, and say what to do.
"""


class InputError(ValueError):
    """Bad input from the user: the message says where and what to do."""
