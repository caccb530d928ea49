"""Objects a plug-in spec may name by mistake whose repr or attribute lookup misbehaves
(tests/test_plugins.py: the error names them by type, on one line)."""


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


class _LookupRaises:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError("getattr exploded")


class _MultiLine:
    def __repr__(self) -> str:
        return "line one\nline two\nline three"


RAISES = _ReprRaises()
LOOKUP_RAISES = _LookupRaises()
MULTI_LINE = _MultiLine()
