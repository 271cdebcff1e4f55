"""Brute-force Bayes posteriors of the wind tunnels, by enumerating or conditioning the generative
process directly: independent routes to the numbers the tasks compute in closed form.
Shared by each task's own tests and by the property-based tests (tests/test_properties.py)."""
import itertools

import torch


def bijection_posterior(V, keys, values, i):
    """P(pi(keys[i]) = v | pairs 0..i-1) by enumerating all V! permutations consistent with them."""
    counts = torch.zeros(V)
    for perm in itertools.permutations(range(V)):
        if all(perm[keys[j]] == values[j] for j in range(i)):
            counts[perm[keys[i]]] += 1
    return counts / counts.sum()


def hmm_filter(T, E, obs, S):
    """p(s_t | o_1..o_t) for every t by summing the joint over all S^t paths of the prefix."""
    out = []
    for t in range(1, len(obs) + 1):
        mass = [0.0] * S
        for path in itertools.product(range(S), repeat=t):
            p = 1.0 / S * E[path[0]][obs[0]]
            for i in range(1, t):
                p *= T[path[i - 1]][path[i]] * E[path[i]][obs[i]]
            mass[path[-1]] += p
        total = sum(mass)
        out.append([m / total for m in mass])
    return torch.tensor(out, dtype=torch.float64)


def recall_posterior(n_keys, n_values, tokens, query_index):
    """P(answer to query `query_index` = v | everything before it), read off the raw tokens alone.

    Enumerates every hidden world: each injective table from the bound keys to values, and each
    tuple of answers to queries 0..query_index, weighting by the generative process (a bound key
    answers its table value; an unbound key answers a uniform draw from all values). Which keys
    are bound and which are asked does not depend on the values, so those factors cancel.
    """
    sep = n_keys + n_values
    split = tokens.index(sep)
    shown_keys = tokens[0:split:2]
    shown_values = [v - n_keys for v in tokens[1:split:2]]
    query_keys = tokens[split + 1::2]
    shown_answers = [a - n_keys for a in tokens[split + 2::2]]

    counts = [0.0] * n_values
    for table_values in itertools.permutations(range(n_values), len(shown_keys)):
        table = dict(zip(shown_keys, table_values))
        if list(table_values) != shown_values:
            continue
        for answers in itertools.product(range(n_values), repeat=query_index + 1):
            if list(answers[:query_index]) != shown_answers[:query_index]:
                continue
            weight = 1.0
            for q, a in zip(query_keys, answers):
                weight *= float(table[q] == a) if q in table else 1.0 / n_values
            counts[answers[query_index]] += weight
    total = sum(counts)
    return torch.tensor([c / total for c in counts])


def regression_predictive(x, y, weight_std, noise_std):
    """p(y_i | y_<i) by conditioning the joint N(0, weight_std^2 X X^T + noise_std^2 I) of all outputs,
    which never forms a posterior over w: an independent route to the same numbers."""
    n = x.shape[0]
    cov = weight_std ** 2 * x @ x.T + noise_std ** 2 * torch.eye(n, dtype=x.dtype)
    means, variances = [], []
    for i in range(n):
        if i == 0:
            means.append(torch.zeros((), dtype=x.dtype))
            variances.append(cov[0, 0])
            continue
        k = cov[i, :i]
        solve = torch.linalg.solve(cov[:i, :i], k)
        means.append(solve @ y[:i])
        variances.append(cov[i, i] - k @ solve)
    return torch.stack(means), torch.stack(variances)


def query_posteriors(task, batch, b: int) -> torch.Tensor:
    """The brute-force posterior at every query position of row ``b`` of a discrete task's batch, [Q, C]."""
    h = batch.hypothesis
    if task.name == "bijection":
        keys, values = h["keys"][b].tolist(), h["values"][b].tolist()
        return torch.stack([bijection_posterior(task.V, keys, values, i) for i in range(len(keys))]).double()
    if task.name == "hmm":
        return hmm_filter(h["T"][b].tolist(), h["E"][b].tolist(), h["observations"][b].tolist(), task.S)
    if task.name == "recall":
        tokens = batch.tokens[b].tolist()
        return torch.stack([recall_posterior(task.n_keys, task.n_values, tokens, i)
                            for i in range(task.queries)]).double()
    raise KeyError(f"no brute force for task {task.name!r}; add one to tests/brute_force.py")
