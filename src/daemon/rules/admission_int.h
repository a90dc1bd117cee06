/* SPDX-License-Identifier: MIT */
/*
 * admission_int.h: internals shared by admission_index.c (which keeps the
 * free-capacity index) and admission_place.c (which queries it). Nobody
 * else includes it: the rest of the daemon sees struct adm_index as opaque
 * and keeps it current through adm_index_update_node (admission.h).
 *
 * The index holds four kinds of treap, each over a pool of entries whose
 * slot is fixed (a device index, or a node index), ordered by (key, tie)
 * with priorities hashed from the slot:
 *
 *   cards[type][mode]  one entry per card that can take a single-card
 *                      placement of that type and mode whatever the
 *                      requirement (healthy, present, node enabled,
 *                      Exclusive unbound, MemorySlice with free memory):
 *                      key = its free memory (2.2), tie = its index.
 *   cover, span        one entry per card that can add to a multi-card
 *                      gathering (nvidia), in gathering order per node
 *                      (Exclusive, MemorySlice, TimeSlice; index order):
 *                      the k-th has L = Σ free of the first k-1 and
 *                      R = L + its free, so a target t is first covered
 *                      on that node by the entry with L < t <= R, and
 *                      the gathering's free sum is R. cover is keyed by
 *                      (R, node) for binpack; span by (L, node) and keeps
 *                      in each subtree the entry of largest R (lowest
 *                      node on ties) for spread.
 *   slack              one entry per enabled node with TimeSlice cards in
 *                      the gathering: key = 1 + (90 % of its memory - used
 *                      - Σ those cards' VRAM), or 0 when negative. A
 *                      requirement whose requiredMemory is >= key may be
 *                      cut short by the TimeSlice headroom of 2.3 on that
 *                      node: cover/span do not hold its answer, so those
 *                      nodes are gathered the plain way.
 *
 * Per mode, a bitmap of the enabled nodes with a card of that mode in the
 * gathering lets multi-node placement skip the others.
 */
#ifndef ACCEL_DAEMON_RULES_ADMISSION_INT_H
#define ACCEL_DAEMON_RULES_ADMISSION_INT_H

#include "daemon/rules/admission.h"

#define IDX_NIL UINT32_MAX

/* One treap entry. */
struct idx_ent {
    uint64_t key; /* order: key, then tie */
    uint64_t aux; /* span: R; cover: L */
    uint32_t tie; /* device index (cards) or node index */
    uint32_t l;   /* left child, IDX_NIL if none */
    uint32_t r;   /* right child */
    uint32_t mx;  /* span: entry of largest (aux, lowest tie) below */
};

/* What the index keeps per node. */
struct idx_node {
    uint32_t ncov;    /* its entries in cover/span: slots first_dev.. */
    bool in_slack;    /* has an entry in slack */
    uint64_t slack;   /* that entry's key */
};

struct adm_index {
    size_t nnodes, ndevs;     /* sizes it was built for */
    struct idx_ent *card;     /* [ndevs] single-card entries */
    uint8_t *card_tree;       /* [ndevs] type * 3 + mode, or 0xff: none */
    struct idx_ent *cov;      /* [ndevs] cover entries, by slot */
    struct idx_ent *spn;      /* [ndevs] span entries, by slot */
    struct idx_ent *slk;      /* [nnodes] slack entries */
    struct idx_node *node;    /* [nnodes] */
    uint64_t *mbits[3];       /* per mode, [(nnodes + 63) / 64] words */
    uint32_t card_root[ACCEL_TYPE_COUNT * 3]; /* by type * 3 + mode */
    uint32_t cov_root;        /* cover */
    uint32_t spn_root;        /* span */
    uint32_t slk_root;        /* slack */
};

/* Smallest entry >= (key, tie), IDX_NIL if none. */
uint32_t idx_ceil(const struct idx_ent *p, uint32_t root, uint64_t key,
                  uint32_t tie);
/* Largest entry <= (key, tie), IDX_NIL if none. */
uint32_t idx_floor(const struct idx_ent *p, uint32_t root, uint64_t key,
                   uint32_t tie);

#endif /* ACCEL_DAEMON_RULES_ADMISSION_INT_H */
