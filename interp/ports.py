"""Is a port free to listen on? Kept apart from the explorer so the CLI can ask before slow imports."""
from __future__ import annotations

import errno
import socket

from .errors import UserError


def check_port(host: str, port: int) -> None:
    """Refuse a port another process listens on, before any slow start-up work."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # The server sets SO_REUSEADDR too, so a port left in TIME_WAIT is not reported as taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise UserError(f"port {port} on {host} is already in use; pick another with --port") from None
            raise UserError(f"cannot listen on {host}:{port} ({err.strerror}); try another --host or --port") from None
