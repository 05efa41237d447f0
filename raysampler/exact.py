"""Exact answers for Gaussian potentials, the yardsticks of the tests.

For quadratic U_i(z) = ½(z − m_i)ᵀP_i(z − m_i) every LMC-type sampler is an affine recursion with Gaussian
noise, s' = F s + c + ε, ε ~ N(0, Ω): its stationary law is N((I − F)⁻¹c, S) with S = F S Fᵀ + Ω
(discrete Lyapunov equation). See docs/algorithms.md, "Exact test targets".
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.linalg


def stationary_law(F: np.ndarray, c: np.ndarray, Omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the stationary law of s' = F s + c + N(0, Ω) (spectral radius of F < 1)."""
    if np.max(np.abs(np.linalg.eigvals(F))) >= 1.0:
        raise ValueError("the recursion is unstable (spectral radius of F ≥ 1): no stationary law")
    mean = np.linalg.solve(np.eye(F.shape[0]) - F, c)
    S = scipy.linalg.solve_discrete_lyapunov(F, Omega)
    return mean, 0.5 * (S + S.T)


def gaussian_posterior(P: Sequence[np.ndarray], m: Sequence[np.ndarray], prior_prec: np.ndarray,
                       prior_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """π ∝ N(m0, P0⁻¹) Π_i exp(−½(θ − m_i)ᵀP_i(θ − m_i)): mean and covariance."""
    Lam = prior_prec + sum(P)
    cov = np.linalg.inv(Lam)
    return cov @ (prior_prec @ prior_mean + sum(Pi @ mi for Pi, mi in zip(P, m))), 0.5 * (cov + cov.T)


def pi_rho(P: Sequence[np.ndarray], m: Sequence[np.ndarray], prior_prec: np.ndarray, prior_mean: np.ndarray,
           rho: Sequence[float], metric: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The θ-marginal π_ρ of DG-LMC's augmented target (eq. 3) for quadratic U_i: mean and covariance.

    Each local factor is convolved with the coupling N(0, ρ_i G) (G = `metric`, I by default; G = LLᵀ when
    the sampler couples in whitened coordinates θ = θ* + Lφ): π_ρ ∝ prior · Π_i N(θ; m_i, P_i⁻¹ + ρ_i G).
    """
    d = prior_prec.shape[0]
    G = np.eye(d) if metric is None else metric
    precs = [np.linalg.solve(np.eye(d) + r * Pi @ G, Pi) for Pi, r in zip(P, rho)]  # (P⁻¹ + ρG)⁻¹, P may be singular
    return gaussian_posterior(precs, m, prior_prec, prior_mean)


def dglmc_lmc_law(P: Sequence[np.ndarray], m: Sequence[np.ndarray], prior_prec: np.ndarray,
                  prior_mean: np.ndarray, rho: Sequence[float], gamma: Sequence[float],
                  n_steps: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
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
        row[:, d * (i + 1):d * (i + 2)] = A
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
