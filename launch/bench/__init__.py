"""Benchmark scripts (not tests), each run as ``python -m launch.bench.<name>``.

* ``discrete``: draws per second of the exact samplers of
  ``dpcore.discrete``.
* ``dpsgd``: a DP-SGD step of ``dpcore.trainer`` against a plain SGD step.
* ``feddpdr``: FedDPDR-DPML at MNIST scale against scikit-learn and a floor.
* ``first_result``: time to the first result of the README's main command.
* ``lvq``: one DP-SGD step of G(M)LVQ against a non-private step.
* ``noise``: JAX's float32 samplers against dpcore's tail-safe samplers.
* ``participants``: FedDPDR participants per second, vmapped against a loop.
* ``peers``: DP-SGD step time of peer engines (Opacus, jax-privacy); run
  outside the project's environment.
* ``secagg``: a ``trust="distributed"`` federated step (distributed
  discrete Gaussian, simulated secure aggregation) against server noise;
  ``secagg_sigma``: the σ it needs beside ``trust="server"`` (its
  accuracy is ``launch.feddpdr --fedsgd_trust=server,distributed``;
  docs/secure_aggregation.md).
* ``scattering``: the scattering transform of MNIST's 70,000 images
  against the same FFTs in ``scipy.fft``.
* ``smo``: our WSS2 SMO against LIBSVM, and vmapped DPWSS repeats.
* ``topk``: batched ``eigh`` against the subspace top-k on DP-PCA matrices.
"""
