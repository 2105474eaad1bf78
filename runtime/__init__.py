"""durasim.runtime (grows with later issues)."""

__all__: list[str] = []
