"""Record kinds: what a batch is (produce, encode, check), one class per layout family.

`kind_for(layout)` picks the kind by the layout's ``kind`` name from the registry; the
fixed-size kind is built in (kinds/fixed.py), plug-ins register theirs (the documents'
``docs``, loader/docs/kind.py). May import: serializers, stores, sources, model, infra,
errors.
"""

from .base import Kind, kind_class, kind_for, register_kind
from .fixed import FixedKind

__all__ = ["FixedKind", "Kind", "kind_class", "kind_for", "register_kind"]
