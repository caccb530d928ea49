"""A path the user typed, with a leading ``~`` expanded.

``Path.expanduser`` raises RuntimeError for ``~name`` where no user is called ``name``
(and where no home directory is known): a path in a spec, a model name or a plug-in spec
is data, and a typo in it must end as "no such file", naming the path, not as a crash.
"""

from __future__ import annotations

from pathlib import Path


def user_path(text: str | Path) -> Path:
    """`text` with ``~`` or ``~user`` expanded; as written where that user is unknown.

    >>> user_path("~no-such-user-here/x.json").as_posix()
    '~no-such-user-here/x.json'
    """
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)
