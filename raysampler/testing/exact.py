"""Exact answers for Gaussian potentials, the yardsticks of the tests.

For quadratic U_i(z) = ½(z − m_i)ᵀP_i(z − m_i) every LMC-type sampler is an affine recursion with Gaussian
noise, s' = F s + c + ε, ε ~ N(0, Ω): its stationary law is N((I − F)⁻¹c, S) with S = F S Fᵀ + Ω
(discrete Lyapunov equation, solved by the tuning layer's `raysampler.tuning.laws.stationary`, which the bias
budget uses at run time). See docs/algorithms.md, "Exact test targets".

Linear regression with unknown noise and a flat or conjugate coefficient prior has a Normal–Inverse-Gamma posterior
(`nig_posterior`, `linear_regression_posterior`): Student-t marginals for the coefficients, inverse-gamma for σ².
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.stats
from scipy.special import digamma, gammaln, polygamma

from ..tuning.laws import stationary


def stationary_law(F: np.ndarray, c: np.ndarray, Omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the stationary law of s' = F s + c + N(0, Ω) (`tuning.laws.stationary`); ValueError
    if the recursion is unstable."""
    law = stationary(F, c, Omega)
    if law is None:
        raise ValueError("the recursion is unstable (spectral radius of F ≥ 1): no stationary law")
    return law


def gaussian_posterior(
    P: Sequence[np.ndarray], m: Sequence[np.ndarray], prior_prec: np.ndarray, prior_mean: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """π ∝ N(m0, P0⁻¹) Π_i exp(−½(θ − m_i)ᵀP_i(θ − m_i)): mean and covariance."""
    Lam = prior_prec + sum(P)
    cov = np.linalg.inv(Lam)
    return cov @ (prior_prec @ prior_mean + sum(Pi @ mi for Pi, mi in zip(P, m))), 0.5 * (cov + cov.T)


def pi_rho(
    P: Sequence[np.ndarray],
    m: Sequence[np.ndarray],
    prior_prec: np.ndarray,
    prior_mean: np.ndarray,
    rho: Sequence[float],
    metric: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The θ-marginal π_ρ of DG-LMC's augmented target (eq. 3) for quadratic U_i: mean and covariance.

    Each local factor is convolved with the coupling N(0, ρ_i G) (G = `metric`, I by default; G = LLᵀ when
    the sampler couples in whitened coordinates θ = θ* + Lφ): π_ρ ∝ prior · Π_i N(θ; m_i, P_i⁻¹ + ρ_i G).
    """
    d = prior_prec.shape[0]
    G = np.eye(d) if metric is None else metric
    precs = [np.linalg.solve(np.eye(d) + r * Pi @ G, Pi) for Pi, r in zip(P, rho)]  # (P⁻¹ + ρG)⁻¹, P may be singular
    return gaussian_posterior(precs, m, prior_prec, prior_mean)


def dglmc_lmc_law(
    P: Sequence[np.ndarray],
    m: Sequence[np.ndarray],
    prior_prec: np.ndarray,
    prior_mean: np.ndarray,
    rho: Sequence[float],
    gamma: Sequence[float],
    n_steps: Sequence[int],
) -> tuple[np.ndarray, np.ndarray]:
    """Exact stationary mean and covariance of θ for DG-LMC with N_i LMC steps (eqs. 4–5), A_i = I.

    Worker i: u ← B_i u + (γ_i/ρ_i)θ + γ_iP_im_i + √(2γ_i)ξ with B_i = (1 − γ_i/ρ_i)I − γ_iP_i, N_i times;
    coordinator: θ ~ N(Q⁻¹(P0m0 + Σ z_i/ρ_i), Q⁻¹), Q = P0 + Σ I/ρ_i. State s = (θ, z_1, …, z_b).
    """
    b, d = len(P), prior_prec.shape[0]
    eye = np.eye(d)
    Q = prior_prec + eye * sum(1.0 / r for r in rho)
    Qi = np.linalg.inv(Q)
    n = d * (b + 1)
    F, c, Om = np.zeros((n, n)), np.zeros(n), np.zeros((n, n))
    Fz_rows, cz, V = [], [], []
    for i in range(b):
        B = (1.0 - gamma[i] / rho[i]) * eye - gamma[i] * P[i]
        G, Vi, Bk = np.zeros((d, d)), np.zeros((d, d)), eye.copy()
        for _ in range(int(n_steps[i])):
            G += Bk
            Vi += 2.0 * gamma[i] * Bk @ Bk.T
            Bk = Bk @ B
        A = Bk  # B^N
        row = np.zeros((d, n))
        row[:, :d] = G * gamma[i] / rho[i]
        row[:, d * (i + 1) : d * (i + 2)] = A
        Fz_rows.append(row)
        cz.append(gamma[i] * G @ P[i] @ m[i])
        V.append(Vi)
    F[:d] = Qi @ sum(row / r for row, r in zip(Fz_rows, rho))
    c[:d] = Qi @ (prior_prec @ prior_mean + sum(ci / r for ci, r in zip(cz, rho)))
    Om[:d, :d] = Qi @ sum(Vi / r**2 for Vi, r in zip(V, rho)) @ Qi + Qi
    for i in range(b):
        sl = slice(d * (i + 1), d * (i + 2))
        F[sl] = Fz_rows[i]
        c[sl] = cz[i]
        Om[sl, sl] = V[i]
        Om[:d, sl] = Qi @ V[i] / rho[i]
        Om[sl, :d] = Om[:d, sl].T
    mean, cov = stationary_law(F, c, Om)
    return mean[:d], cov[:d, :d]


def gaussian_w2(m1: np.ndarray, S1: np.ndarray, m2: np.ndarray, S2: np.ndarray) -> float:
    """2-Wasserstein distance between N(m1, S1) and N(m2, S2) (Bures formula)."""
    r1 = scipy.linalg.sqrtm(S1)
    cross = scipy.linalg.sqrtm(r1 @ S2 @ r1)
    val = np.sum((m1 - m2) ** 2) + np.trace(S1 + S2 - 2.0 * np.real(cross))
    return float(np.sqrt(max(val, 0.0)))


# ----------------------------------------------------------------------------- linear regression, unknown noise


@dataclass(frozen=True)
class NIGPosterior:
    """Normal–Inverse-Gamma law of linear regression's (β, σ²): σ² ~ InvGamma(a, b), β | σ² ~ N(mean, σ² V).

    Marginals: β_j ~ Student-t with 2a degrees of freedom, location mean_j, scale √(b V_jj / a); σ² ~ InvGamma(a, b);
    log σ = (log b − log G)/2 with G ~ Gamma(a, 1). `theta_*` give them in the sampler's coordinates θ = (β, log σ),
    the layout of `LinearRegression(noise_sd=None)`'s draws.
    """

    mean: np.ndarray
    V: np.ndarray
    a: float
    b: float

    @property
    def df(self) -> float:
        """Degrees of freedom of the β marginals (2a)."""
        return 2.0 * self.a

    def beta_scale(self) -> np.ndarray:
        """Scales of the β_j marginals, √(b V_jj / a)."""
        return np.sqrt(self.b / self.a * np.diag(self.V))

    def beta_marginal(self, j: int):
        """β_j's marginal as a frozen scipy.stats distribution."""
        return scipy.stats.t(self.df, loc=self.mean[j], scale=self.beta_scale()[j])

    def sigma2_marginal(self):
        """σ²'s marginal, InvGamma(a, b), as a frozen scipy.stats distribution."""
        return scipy.stats.invgamma(self.a, scale=self.b)

    def beta_sd(self) -> np.ndarray:
        """sd of each β_j (finite for a > 1)."""
        return np.sqrt(self.b / (self.a - 1.0) * np.diag(self.V)) if self.a > 1 else np.full(len(self.mean), np.inf)

    def sigma_mean(self) -> float:
        """E[σ] = √b Γ(a − ½)/Γ(a) (a > ½)."""
        return float(np.sqrt(self.b) * np.exp(gammaln(self.a - 0.5) - gammaln(self.a)))

    def sigma_sd(self) -> float:
        """sd of σ, from E[σ²] = b/(a − 1) (a > 1)."""
        return float(np.sqrt(self.b / (self.a - 1.0) - self.sigma_mean() ** 2))

    def log_sigma_mean(self) -> float:
        """E[log σ] = (log b − ψ(a))/2."""
        return float(0.5 * (np.log(self.b) - digamma(self.a)))

    def log_sigma_sd(self) -> float:
        """sd of log σ = √ψ'(a) / 2."""
        return float(0.5 * np.sqrt(polygamma(1, self.a)))

    def theta_mean(self) -> np.ndarray:
        """Posterior mean of θ = (β, log σ)."""
        return np.append(self.mean, self.log_sigma_mean())

    def theta_sd(self) -> np.ndarray:
        """Posterior sds of θ = (β, log σ)."""
        return np.append(self.beta_sd(), self.log_sigma_sd())

    def theta_quantile(self, q) -> np.ndarray:
        """Quantiles q (scalar or (m,)) of every coordinate of θ = (β, log σ): shape (p + 1,) or (m, p + 1)."""
        q = np.asarray(q, dtype=np.float64)
        beta = self.mean + self.beta_scale() * scipy.stats.t.ppf(q[..., None], self.df)
        # log σ = ½ log σ², and log is increasing: the q-quantile of σ² maps to that of log σ
        log_sigma = 0.5 * np.log(self.sigma2_marginal().ppf(q))
        return np.concatenate([beta, np.asarray(log_sigma)[..., None]], axis=-1)

    def log_density(self, theta: np.ndarray) -> np.ndarray:
        """Normalised log density of θ = (β, log σ), rows of a (K, p + 1) array: log NIG(β, σ²) + log(2σ²)."""
        theta = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        beta, log_s2 = theta[:, :-1], 2.0 * theta[:, -1]
        p = beta.shape[1]
        diff = beta - self.mean
        quad = np.einsum("kp,kp->k", diff @ np.linalg.inv(self.V), diff)
        _, logdetV = np.linalg.slogdet(self.V)
        s2 = np.exp(log_s2)
        log_normal = -0.5 * (p * np.log(2 * np.pi) + p * log_s2 + logdetV + quad / s2)
        log_ig = self.a * np.log(self.b) - gammaln(self.a) - (self.a + 1.0) * log_s2 - self.b / s2
        return log_normal + log_ig + np.log(2.0) + log_s2


def nig_posterior(
    XtX: np.ndarray,
    Xty: np.ndarray,
    yty: float,
    n: int,
    *,
    a0: float,
    b0: float,
    prior_mean: np.ndarray | None = None,
    prior_precision: np.ndarray | None = None,
) -> NIGPosterior:
    """Posterior of linear regression y ~ N(Xβ, σ²I) with σ² ~ InvGamma(a0, b0) and either a flat prior on β
    (`prior_precision` None) or the conjugate β | σ² ~ N(prior_mean, σ² prior_precision⁻¹), from the pooled sufficient
    statistics XᵀX, Xᵀy, yᵀy and n. Improper σ² priors are InvGamma(a0, 0) with a0 = 0 (density 1/σ², flat on log σ)
    or a0 = −½ (flat on σ).

    Λ = Λ0 + XᵀX, mean = Λ⁻¹(Λ0 m0 + Xᵀy), V = Λ⁻¹, a = a0 + (n − p + p0)/2 (p0 = p for the conjugate prior, 0 for
    the flat one), b = b0 + (yᵀy + m0ᵀΛ0 m0 − meanᵀ Λ mean)/2.
    """
    XtX = np.asarray(XtX, dtype=np.float64)
    p = XtX.shape[0]
    Lam0 = np.zeros((p, p)) if prior_precision is None else np.asarray(prior_precision, dtype=np.float64)
    m0 = np.zeros(p) if prior_mean is None else np.asarray(prior_mean, dtype=np.float64)
    Lam = Lam0 + XtX
    try:
        cf = scipy.linalg.cho_factor(Lam, lower=True)
    except np.linalg.LinAlgError:
        raise ValueError("nig_posterior: XᵀX + prior precision is singular: the posterior is improper") from None
    mean = scipy.linalg.cho_solve(cf, Lam0 @ m0 + np.asarray(Xty, dtype=np.float64))
    V = scipy.linalg.cho_solve(cf, np.eye(p))
    a = a0 + 0.5 * (n - p + (0 if prior_precision is None else p))
    b = b0 + 0.5 * (float(yty) + m0 @ Lam0 @ m0 - mean @ Lam @ mean)
    if a <= 0 or b <= 0:
        raise ValueError(
            f"nig_posterior: a = {a:g}, b = {b:g}: the posterior is improper (too few rows, or a perfect "
            "fit with an improper noise prior)"
        )
    return NIGPosterior(mean, 0.5 * (V + V.T), float(a), float(b))


def linear_regression_posterior(model, shards: Iterable[tuple[np.ndarray, np.ndarray]]) -> NIGPosterior:
    """The exact posterior of a bound `LinearRegression(noise_sd=None)` with a flat coefficient prior
    (Normal(scale=inf) on every coefficient) and an InverseGamma or Flat noise prior, given all shards
    [(X_1, y_1), …]: Normal–Inverse-Gamma (`nig_posterior`). Other priors have no closed form (ValueError). A
    `LogNormalRegression` (the linear regression of log y) gets the posterior of its (β, σ), from log y."""
    from ..models.linear import LinearRegression
    from ..models.lognormal import LogNormalRegression
    from ..priors import Flat, InverseGamma, Normal

    if not isinstance(model, LinearRegression) or model.known_noise:
        raise ValueError("linear_regression_posterior needs a LinearRegression with unknown noise (noise_sd=None)")
    cp = model.coef_prior
    if not (isinstance(cp, Normal) and np.all(np.isinf(cp.scale))):
        raise ValueError(
            f"coef_prior: the closed form needs a flat prior Normal(scale=inf) on every coefficient, got {cp!r}"
        )
    if not isinstance(model.sigma_prior, (InverseGamma, Flat)):
        raise ValueError(f"sigma_prior: the closed form needs InverseGamma or Flat, got {model.sigma_prior!r}")
    p = model.n_coef
    XtX, Xty, yty, n = np.zeros((p, p)), np.zeros(p), 0.0, 0
    for X, y in shards:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if isinstance(model, LogNormalRegression):
            y = np.log(y)
        XtX += X.T @ X
        Xty += X.T @ y
        yty += float(y @ y)
        n += X.shape[0]
    a0, b0 = model.sigma_prior.nig_shape()
    return nig_posterior(XtX, Xty, yty, n, a0=a0, b0=b0)
