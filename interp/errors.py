"""User errors: one line for the person at the terminal, a non-zero exit, no traceback."""


class UserError(Exception):
    """Something the user can fix (a path, a name, a number). The message says what and how."""


class Diverged(UserError):
    """Training stopped because its loss became NaN or infinite: the rate, not the user's input, is at fault
    (a sweep over rates records such a point as diverged and goes on)."""
