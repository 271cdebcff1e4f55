"""User errors: one line for the person at the terminal, a non-zero exit, no traceback."""


class UserError(Exception):
    """Something the user can fix (a path, a name, a number). The message says what and how."""
