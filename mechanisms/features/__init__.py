"""Hand-crafted image features for private learning, and their normalisation.

* :mod:`mechanisms.features.scattering`: the 2-D order-2 scattering
  transform (Morlet wavelets, FFT in JAX) — data-independent, so it costs
  no privacy.
* :mod:`mechanisms.features.normalization`: per-example group
  normalisation (free) and private data normalisation (per-channel mean
  and variance by the Gaussian mechanism, the one mechanism shape).
* :mod:`mechanisms.features.hog`: histograms of oriented gradients
  (scikit-image's descriptor, jitted), FedDPDR's CIFAR-10 features —
  data-independent too.
* :mod:`mechanisms.features.projection`: a public random orthonormal
  projection to fewer dimensions (data-free, no privacy cost).
* :mod:`mechanisms.features.scatternet`: the linear ScatterNet, scattering
  features under a softmax head trained by DP-SGD, its normalisation in
  the same ledger.
"""

from dpcore import lazy

__getattr__, __dir__, __all__ = lazy.attach(__name__)
