"""Model zoo: CNN name -> random-weight definition -> static features and executed-PTX counts (docs/zoo.md).

Heavy frameworks (torch, torchvision, timm, keras, jax, apache-tvm) are imported lazily by the functions that
need them, so importing this package and its name checks work without the `zoo` extra.
"""

from src.zoo.names import ModelSpec, UnknownModelError
from src.zoo.pipeline import ptx_features
from src.zoo.resolve import MissingFrameworkError, UnsupportedModelError, build
from src.zoo.static import static_features

__all__ = ["MissingFrameworkError", "ModelSpec", "UnknownModelError", "UnsupportedModelError", "build",
           "ptx_features", "static_features"]
