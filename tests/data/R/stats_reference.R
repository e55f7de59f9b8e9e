# Reference values for tests/test_stats.py, computed in R by calls evalkit does not
# wrap (evalkit.stats uses scipy, statsmodels and the krippendorff package; nothing
# here calls them). The output, tests/data/R/stats_reference.json, is the record the
# tests read: R is not installed in CI.
#
# Regenerate (Debian 12: apt-get install r-base-core r-cran-vcd r-cran-psych
# r-cran-sandwich r-cran-jsonlite), from the repository root:
#
#     Rscript tests/data/R/stats_reference.R
#
# Each block carries the R expression that made its numbers ("source"). Numbers are
# written with 15 significant digits (the JSON's "digits").

suppressPackageStartupMessages({
  library(jsonlite)
  library(vcd)
  library(psych)
  library(sandwich)
})

DIGITS <- 15
OUT <- "tests/data/R/stats_reference.json"
COMMAND <- "Rscript tests/data/R/stats_reference.R"

# --------------------------------------------------------------- exact binomial test

# Sign test: wins out of wins + losses at p = 1/2, ties dropped.
tallies <- list(c(1, 0), c(0, 1), c(5, 0), c(6, 0), c(5, 1), c(9, 3), c(12, 4),
                c(20, 20), c(30, 18), c(3, 17), c(100, 70), c(250, 200), c(7, 8))
sign_rows <- lapply(tallies, function(t) {
  w <- t[1]; n <- t[1] + t[2]
  list(wins = w, losses = t[2],
       two_sided = binom.test(w, n, 0.5)$p.value,
       greater = binom.test(w, n, 0.5, alternative = "greater")$p.value,
       less = binom.test(w, n, 0.5, alternative = "less")$p.value)
})

# Rejection region of the exact two-sided test at level alpha, from binom.test itself.
rejects <- function(w, d, alpha) {
  if (d == 0) return(FALSE)
  binom.test(w, d, 0.5)$p.value <= alpha
}

# Critical value: the largest c with min(wins, losses) <= c rejecting; -1 if none.
critical <- function(d, alpha) {
  cs <- which(sapply(0:d, function(w) rejects(w, d, alpha))) - 1
  cs <- cs[cs <= d / 2]
  if (length(cs) == 0) -1 else max(cs)
}
crit_alphas <- c(0.01, 0.02, 0.05, 0.1)
crit_rows <- lapply(crit_alphas, function(a) list(alpha = a, discordant = 1:60,
                                                   critical = sapply(1:60, critical, alpha = a)))

# --------------------------------------------------------------- proportion intervals

interval_cases <- list(c(0, 1), c(1, 1), c(0, 10), c(1, 10), c(5, 10), c(10, 10), c(3, 40),
                       c(17, 60), c(81, 263), c(15, 148), c(199, 200), c(682, 925), c(0, 20))
jeffreys <- function(x, n, alpha) {
  # Brown, Cai & DasGupta 2001, section 4.1.2: the equal-tailed Beta(x+1/2, n-x+1/2)
  # interval, with the lower end 0 at x = 0 and the upper end 1 at x = n.
  c(if (x == 0) 0 else qbeta(alpha / 2, x + 0.5, n - x + 0.5),
    if (x == n) 1 else qbeta(1 - alpha / 2, x + 0.5, n - x + 0.5))
}
interval_rows <- list()
for (case in interval_cases) for (alpha in c(0.05, 0.1, 0.01)) {
  x <- case[1]; n <- case[2]
  interval_rows[[length(interval_rows) + 1]] <- list(
    successes = x, n = n, alpha = alpha,
    `clopper-pearson` = as.numeric(binom.test(x, n, conf.level = 1 - alpha)$conf.int),
    wilson = as.numeric(suppressWarnings(prop.test(x, n, correct = FALSE, conf.level = 1 - alpha))$conf.int),
    jeffreys = jeffreys(x, n, alpha))
}

# --------------------------------------------------------------- McNemar

mcnemar_cases <- list(c(3, 10), c(0, 7), c(1, 0), c(12, 12), c(13, 13), c(20, 21),
                      c(30, 14), c(150, 86))
mcnemar_rows <- lapply(mcnemar_cases, function(bc) {
  b <- bc[1]; c <- bc[2]
  chi <- mcnemar.test(matrix(c(0, c, b, 0), 2), correct = TRUE)
  list(b = b, c = c,
       exact_p = binom.test(b, b + c, 0.5)$p.value,
       chi2 = unname(chi$statistic), chi2_p = chi$p.value)
})

# --------------------------------------------------------------- power and sample size

# P(reject | d discordant pairs) at win rate w, summing dbinom over the region.
reject_given_d <- function(d, w, alpha) {
  if (d == 0) return(0)
  region <- sapply(0:d, function(x) rejects(x, d, alpha))
  sum(dbinom(0:d, d, w)[region])
}
power_exact <- function(n, w, t, alpha) {
  r <- sapply(0:n, reject_given_d, w = w, alpha = alpha)
  sum(dbinom(0:n, n, 1 - t) * r)
}
power_cases <- list(c(20, 0.75, 0, 0.05), c(30, 0.7, 0.25, 0.05), c(12, 0.9, 0.1, 0.05),
                    c(25, 0.3, 0.4, 0.05), c(60, 0.7, 0.2, 0.05), c(100, 0.62, 0.5, 0.05),
                    c(80, 0.8, 0.75, 0.05), c(40, 0.75, 0.1, 0.01), c(50, 0.5, 0.3, 0.05))
connor <- function(n, w, t, alpha) {
  psi <- 1 - t; delta <- abs(2 * w - 1) * psi
  pnorm((delta * sqrt(n) - qnorm(1 - alpha / 2) * sqrt(psi)) / sqrt(psi - delta^2))
}
power_rows <- lapply(power_cases, function(p) list(
  n_trials = p[1], win_rate = p[2], tie_rate = p[3], alpha = p[4],
  power = power_exact(p[1], p[2], p[3], p[4]),
  power_connor = connor(p[1], p[2], p[3], p[4])))

# Paired proportions: enumerate the trinomial (first only, second only, neither or both).
paired_power <- function(n, p10, p01, alpha) {
  total <- 0
  for (b in 0:n) for (c in 0:(n - b)) {
    if (rejects(b, b + c, alpha))
      total <- total + dmultinom(c(b, c, n - b - c), prob = c(p10, p01, 1 - p10 - p01))
  }
  total
}
paired_cases <- list(c(80, 0.2, 0.05, 0.05), c(50, 0.15, 0.05, 0.05), c(60, 0.1, 0.1, 0.05),
                     c(40, 0.3, 0.1, 0.01))
paired_rows <- lapply(paired_cases, function(p) list(
  n_pairs = p[1], p_first_only = p[2], p_second_only = p[3], alpha = p[4],
  power = paired_power(p[1], p[2], p[3], p[4])))

# Sample size: the exact power curve n = 0..n_max, its first n at the target and the n
# from which it stays there, and the normal approximations.
first_stable <- function(curve, target) {
  ok <- curve >= target
  c(first = which(ok)[1] - 1, stable = max(which(!ok)))  # curve[i] is n = i - 1
}
size_cases <- list(c(0.75, 0, 0.05, 0.8), c(0.75, 0.3, 0.05, 0.8), c(0.65, 0.2, 0.05, 0.9),
                   c(0.3, 0, 0.05, 0.8), c(0.8, 0.5, 0.01, 0.8))
size_rows <- lapply(size_cases, function(p) {
  w <- max(p[1], 1 - p[1]); t <- p[2]; alpha <- p[3]; target <- p[4]
  za <- qnorm(1 - alpha / 2); zb <- qnorm(target)
  d_approx <- ceiling(((za * 0.5 + zb * sqrt(w * (1 - w))) / (w - 0.5))^2)
  psi <- 1 - t; delta <- (2 * w - 1) * psi
  n_approx <- ceiling(((za * sqrt(psi) + zb * sqrt(psi - delta^2)) / delta)^2)
  r <- sapply(0:(4 * n_approx), reject_given_d, w = w, alpha = alpha)
  d_curve <- r[1:(4 * d_approx + 1)]
  t_curve <- sapply(0:(4 * n_approx), function(n) sum(dbinom(0:n, n, 1 - t) * r[1:(n + 1)]))
  d <- first_stable(d_curve, target); n <- first_stable(t_curve, target)
  list(win_rate = p[1], tie_rate = t, alpha = alpha, power = target,
       discordant_first = unname(d["first"]), discordant_stable = unname(d["stable"]),
       trials_first = unname(n["first"]), trials_stable = unname(n["stable"]),
       discordant_approx = d_approx, trials_approx = n_approx,
       power_at_first = t_curve[n["first"] + 1], power_at_stable = t_curve[n["stable"] + 1],
       searched_to = 4 * n_approx)
})

# --------------------------------------------------------------- Cohen's kappa

kappa_tables <- list(
  matrix(c(20, 5, 10, 15), 2, byrow = TRUE),
  matrix(c(0, 4, 1, 0, 8, 0, 0, 1, 5), 3, byrow = TRUE),
  matrix(c(10, 4, 1, 3, 12, 5, 0, 6, 14), 3, byrow = TRUE),
  matrix(c(30, 6, 2, 0, 4, 25, 7, 1, 1, 5, 20, 6, 0, 1, 4, 18), 4, byrow = TRUE))
kappa_rows <- lapply(kappa_tables, function(m) {
  lin <- Kappa(m, weights = "Equal-Spacing")
  quad <- Kappa(m, weights = "Fleiss-Cohen")
  ps <- cohen.kappa(m, n.obs = sum(m))
  ci <- confint(lin, level = 0.95)
  list(table = unname(lapply(seq_len(nrow(m)), function(i) m[i, ])),
       kappa = unname(lin$Unweighted["value"]), kappa_se = unname(lin$Unweighted["ASE"]),
       kappa_low = unname(ci["Unweighted", 1]), kappa_high = unname(ci["Unweighted", 2]),
       linear = unname(lin$Weighted["value"]), quadratic = unname(quad$Weighted["value"]),
       psych_kappa = ps$kappa, psych_kappa_se = sqrt(ps$var.kappa),
       psych_quadratic = ps$weighted.kappa)
})

# --------------------------------------------------------------- Krippendorff's alpha

# Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability", section C: the
# coincidence matrix of pairable values and the metric differences of each level.
kripp_alpha <- function(ratings, level) {
  values <- sort(unique(as.vector(ratings[!is.na(ratings)])))
  k <- length(values)
  o <- matrix(0, k, k)
  for (u in seq_len(ncol(ratings))) {
    v <- ratings[!is.na(ratings[, u]), u]
    m <- length(v)
    if (m < 2) next
    for (i in seq_len(m)) for (j in seq_len(m)) if (i != j) {
      a <- match(v[i], values); b <- match(v[j], values)
      o[a, b] <- o[a, b] + 1 / (m - 1)
    }
  }
  nc <- rowSums(o); n <- sum(nc)
  delta2 <- matrix(0, k, k)
  for (a in seq_len(k)) for (b in seq_len(k)) {
    delta2[a, b] <- switch(level,
      nominal = as.numeric(a != b),
      ordinal = if (a == b) 0 else (sum(nc[min(a, b):max(a, b)]) - (nc[a] + nc[b]) / 2)^2,
      interval = (values[a] - values[b])^2,
      ratio = ((values[a] - values[b]) / (values[a] + values[b]))^2)
  }
  do <- sum(o * delta2) / n
  de <- sum(outer(nc, nc) * delta2) / (n * (n - 1))
  1 - do / de
}
kripp_sets <- list(
  krippendorff_2011 = rbind(
    c(1, 2, 3, 3, 2, 1, 4, 1, 2, NA, NA, NA),
    c(1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NA, 3),
    c(NA, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NA),
    c(1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NA)),
  wikipedia = rbind(
    c(NA, NA, NA, NA, NA, 3, 4, 1, 2, 1, 1, 3, 3, NA, 3),
    c(1, NA, 2, 1, 3, 3, 4, 3, NA, NA, NA, NA, NA, NA, NA),
    c(NA, NA, 2, 1, 3, 4, 4, NA, 2, 1, 1, 3, 3, NA, 4)),
  three_raters = rbind(
    c(1, 2, 2, 3, 5, 4, 1, NA),
    c(1, 2, 3, 3, 4, 4, 2, 2),
    c(2, 2, 3, NA, 5, 5, 1, 2)))
kripp_rows <- lapply(names(kripp_sets), function(name) {
  r <- kripp_sets[[name]]
  list(name = name,
       ratings = unname(lapply(seq_len(nrow(r)), function(i) {
         x <- as.list(r[i, ]); x[is.na(r[i, ])] <- list(NULL); x })),
       alpha = sapply(c("nominal", "ordinal", "interval", "ratio"), kripp_alpha, ratings = r,
                      simplify = FALSE))
})

# --------------------------------------------------------------- means and standard errors

scores <- c(1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0)
cluster <- rep(1:6, each = 4)
fit <- lm(scores ~ 1)
a <- c(0.61, 0.72, 0.55, 0.90, 0.33, 0.47, 0.81, 0.64, 0.52, 0.77, 0.69, 0.40)
b <- c(0.58, 0.65, 0.57, 0.84, 0.30, 0.41, 0.80, 0.55, 0.50, 0.70, 0.66, 0.41)
pair_cluster <- rep(1:4, each = 3)
tt <- t.test(a, b, paired = TRUE)
z <- qnorm(0.975)
d <- a - b
se_pair_cl <- sqrt(vcovCL(lm(d ~ 1), cluster = pair_cluster, type = "HC0", cadjust = FALSE)[1, 1])
means <- list(
  values = scores, clusters = cluster,
  mean = mean(scores), se = sd(scores) / sqrt(length(scores)),
  se_clustered = sqrt(vcovCL(fit, cluster = cluster, type = "HC0", cadjust = FALSE)[1, 1]))
paired <- list(
  a = a, b = b, clusters = pair_cluster,
  mean = unname(tt$estimate), se = tt$stderr, correlation = cor(a, b),
  low = unname(tt$estimate) - z * tt$stderr, high = unname(tt$estimate) + z * tt$stderr,
  se_unpaired = sqrt(var(a) / length(a) + var(b) / length(b)),
  se_clustered = se_pair_cl)

# --------------------------------------------------------------- write

ref <- list(
  command = COMMAND,
  r_version = R.version.string,
  packages = list(vcd = as.character(packageVersion("vcd")), psych = as.character(packageVersion("psych")),
                  sandwich = as.character(packageVersion("sandwich")),
                  jsonlite = as.character(packageVersion("jsonlite"))),
  digits = DIGITS,
  sign_test = list(source = "binom.test(wins, wins + losses, 0.5, alternative = 'two.sided' | 'greater' | 'less')$p.value",
                   rows = sign_rows),
  sign_critical = list(source = "largest c <= d/2 such that binom.test(c, d, 0.5)$p.value <= alpha; -1 if none",
                       rows = crit_rows),
  intervals = list(source = paste("binom.test(x, n, conf.level = 1 - alpha)$conf.int (Clopper-Pearson);",
                                  "prop.test(x, n, correct = FALSE, conf.level = 1 - alpha)$conf.int (Wilson score);",
                                  "qbeta(c(alpha/2, 1 - alpha/2), x + 0.5, n - x + 0.5), 0 at x = 0 and 1 at x = n",
                                  "(Jeffreys, Brown, Cai & DasGupta 2001 section 4.1.2)"),
                   rows = interval_rows),
  mcnemar = list(source = paste("mcnemar.test(matrix(c(0, c, b, 0), 2), correct = TRUE) (statistic, p.value);",
                                "binom.test(b, b + c, 0.5)$p.value (exact)"),
                 rows = mcnemar_rows),
  power = list(source = paste("sum over d of dbinom(d, n, 1 - tie_rate) * sum(dbinom(x, d, win_rate)) over the x with",
                              "binom.test(x, d, 0.5)$p.value <= alpha; Connor 1987:",
                              "pnorm((delta sqrt(n) - qnorm(1 - alpha/2) sqrt(psi)) / sqrt(psi - delta^2))"),
               rows = power_rows),
  paired_proportion_power = list(
    source = "sum of dmultinom(c(b, c, n - b - c), prob = c(p10, p01, 1 - p10 - p01)) over binom.test(b, b + c)$p.value <= alpha",
    rows = paired_rows),
  sample_size = list(source = paste("the exact power curve above for n = 0 .. searched_to; first n with power >= target,",
                                    "and one past the last n below it; approximations as in Connor 1987"),
                     rows = size_rows),
  kappa = list(source = paste("vcd::Kappa(table, weights = 'Equal-Spacing' | 'Fleiss-Cohen') (value, ASE);",
                              "confint(vcd::Kappa(table)); psych::cohen.kappa(table, n.obs = sum(table))"),
               rows = kappa_rows),
  krippendorff = list(source = "kripp_alpha() above: Krippendorff 2011 section C coincidences and metric differences",
                      rows = kripp_rows),
  mean_and_se = list(source = paste("mean(y); sd(y) / sqrt(length(y));",
                                    "sqrt(sandwich::vcovCL(lm(y ~ 1), cluster, type = 'HC0', cadjust = FALSE))"),
                     data = means),
  paired_difference = list(source = paste("t.test(a, b, paired = TRUE) ($estimate, $stderr); cor(a, b);",
                                          "estimate +- qnorm(0.975) * stderr; sqrt(var(a)/n + var(b)/n);",
                                          "vcovCL(lm(a - b ~ 1), cluster, type = 'HC0', cadjust = FALSE)"),
                           data = paired))

tmp <- paste0(OUT, ".tmp")
write(toJSON(ref, auto_unbox = TRUE, digits = I(DIGITS), pretty = TRUE, null = "null"), tmp)
invisible(file.rename(tmp, OUT))
cat("wrote", OUT, "\n")
