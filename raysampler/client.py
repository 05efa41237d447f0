"""The Python SDK under its first name: `raysampler.client` is `raysampler.sdk` (see there), kept so that programs
written against it keep working unchanged.

    from raysampler.client import Client    # the same class as raysampler.sdk.Client
"""

from .sdk import *  # noqa: F403  (every public name of the SDK, as before)
from .sdk import __all__ as __all__
