"""sd_notify without libsystemd: tell the service manager how the mount is doing (§8, §9).

A notification is one datagram on an ``AF_UNIX``/``SOCK_DGRAM`` socket sent to
``$NOTIFY_SOCKET``; see sd_notify(3). Nothing here may stop a mount: an unset
``NOTIFY_SOCKET`` (not running under systemd) is the normal case, and a failed
send is logged, never raised.

Plain module: imports neither trio nor pyfuse3. ``notify`` is synchronous and
thread-safe; it never blocks for longer than ``SEND_TIMEOUT``, so calling it
from a trio task or ``Operations.init()`` is fine.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)

READY = "READY=1"
STOPPING = "STOPPING=1"

# systemd reads its notify socket promptly; a manager so wedged that its socket
# buffer stays full must not wedge the mount with it.
SEND_TIMEOUT = 2.0


def notify(state: str, env: Mapping[str, str] = os.environ) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to the service manager.

    Args:
        state: newline-separated ``KEY=VALUE`` assignments, as in sd_notify(3).
        env: where ``NOTIFY_SOCKET`` is looked up.

    Returns:
        True when the datagram was sent; False when ``NOTIFY_SOCKET`` is unset,
        malformed, or the send failed (the last two are logged).

    Raises:
        ValueError: ``state`` is empty; systemd would ignore it, so it is a bug.
    """
    if not state:
        raise ValueError(f"state must be a non-empty KEY=VALUE text, got {state!r}")
    target = env.get("NOTIFY_SOCKET")
    if not target:
        return False
    address = socket_address(target)
    if address is None:
        log.warning(
            "NOTIFY_SOCKET=%r is neither an absolute path nor an abstract '@name'; not sending %r",
            target,
            state,
        )
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(SEND_TIMEOUT)
            sock.sendto(state.encode("utf-8"), address)
    except OSError as exc:
        # Includes TimeoutError. The mount works without systemd's knowledge;
        # at worst systemd times the start out, which it reports itself.
        log.warning("sd_notify %r to %s failed: %s", state, target, exc)
        return False
    return True


def socket_address(target: str) -> bytes | None:
    """The ``AF_UNIX`` address for a ``NOTIFY_SOCKET`` value, or None if it is not one.

    A leading ``@`` names the Linux abstract namespace, which the kernel spells
    with a leading NUL byte. Bytes, not str, so an undecodable path survives.
    """
    raw = os.fsencode(target)
    if raw.startswith(b"@"):
        return b"\0" + raw[1:]
    if raw.startswith(b"/"):
        return raw
    return None
