/* hf_config.c - a model preset from a HuggingFace config.json, for
 * `scree-tune prewarm --hf-config FILE` (docs/cli.md, "--hf-config").
 *
 * The config's sizes become the op lines a preset of presets/models.txt
 * would give the model (llama-3-8b's lines, with its numbers), written as
 * preset text and read by scree__presets_parse, so that the two paths
 * expand alike. SQLite parses the JSON, as for the shapes files
 * (shapes.c): the strict parser the library links already; a file it
 * refuses is located by scree__json_syntax_error (line, column, reason).
 *
 * Read: model_type, hidden_size, num_attention_heads,
 * num_key_value_heads (default: the heads), head_dim (default:
 * hidden_size / heads), intermediate_size (gated MLPs), vocab_size,
 * hidden_act or hidden_activation, rotary_dim, partial_rotary_factor or
 * rotary_pct. A multimodal config without a top-level hidden_size is read
 * from its "text_config" object. Everything else (layers, rope_theta,
 * rope_scaling, eps, sliding windows) does not change a call shape of the
 * ops scree tunes; sliding windows are tuned as full causal attention, as
 * the presets do. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/presets.h"

/* The architectures read, by model_type. */
typedef struct hf_arch {
  const char *type;
  int rmsnorm;   /* RMSNorm (+ add_rmsnorm), else LayerNorm */
  int gated;     /* a gated MLP: SwiGLU when its activation is silu */
  double rotary; /* the rotary fraction of a head when the config names none */
} hf_arch;

static const hf_arch ARCHS[] = {
    {"llama", 1, 1, 1.0},   {"mistral", 1, 1, 1.0}, {"qwen2", 1, 1, 1.0},
    {"qwen3", 1, 1, 1.0},   {"gemma", 1, 1, 1.0},   {"phi3", 1, 1, 1.0},
    {"gpt_neox", 0, 0, 0.25}, {"phi", 0, 0, 0.5},
};
#define NARCHS (sizeof ARCHS / sizeof ARCHS[0])

/* The largest size a field may give (shape fields stop at 2^40; no model
 * comes near 2^31). */
#define FIELD_MAX ((sqlite3_int64)1 << 31)

typedef struct hf {
  sqlite3 *db;
  const char *json;
  const char *path; /* the file, for messages */
  char obj[32];     /* "$" or "$.text_config": where the fields are read */
  char *why;
  size_t why_size;
} hf;

/* One field: its SQLite json_type ("" when absent or null) and value. */
typedef struct field {
  char type[16];
  sqlite3_int64 i;
  double d;
  char s[64];
} field;

/* How a json_type reads in a message. */
static const char *describe(const char *type) {
  static const char *const names[][2] = {
      {"object", "an object"}, {"array", "a list"}, {"text", "a string"},
      {"integer", "an integer"}, {"real", "a number with a fraction"}, {"true", "true"},
      {"false", "false"}, {"null", "null"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(type, names[i][0])) return names[i][1];
  return "nothing";
}

static int sql_failed(hf *h) {
  scree__set_why(h->why, h->why_size, "%s: SQLite: %s", h->path, sqlite3_errmsg(h->db));
  return -1;
}

/* Reads key of the config object into *f. 0, or -1 with why set. */
static int get(hf *h, const char *key, field *f) {
  memset(f, 0, sizeof *f);
  char path[96];
  snprintf(path, sizeof path, "%s.%s", h->obj, key);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(h->db, "SELECT json_type(?1, ?2), json_extract(?1, ?2)", -1, &st,
                         NULL) != SQLITE_OK)
    return sql_failed(h);
  sqlite3_bind_text(st, 1, h->json, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    return sql_failed(h);
  }
  const char *t = (const char *)sqlite3_column_text(st, 0);
  if (t && strcmp(t, "null")) {
    snprintf(f->type, sizeof f->type, "%s", t);
    f->i = sqlite3_column_int64(st, 1);
    f->d = sqlite3_column_double(st, 1);
    const char *s = (const char *)sqlite3_column_text(st, 1);
    snprintf(f->s, sizeof f->s, "%s", s ? s : "");
  }
  sqlite3_finalize(st);
  return 0;
}

/* A positive integer field: 0 with *v set, 1 when absent (or null) and
 * not required, -1 with why set. */
static int get_int(hf *h, const char *key, int required, sqlite3_int64 *v) {
  field f;
  if (get(h, key, &f)) return -1;
  if (!f.type[0]) {
    if (!required) return 1;
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is missing (a required field)", h->path,
                   key);
    return -1;
  }
  if (strcmp(f.type, "integer")) {
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is %s, not an integer", h->path, key,
                   describe(f.type));
    return -1;
  }
  if (f.i < 1 || f.i > FIELD_MAX) {
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is %lld: give an integer from 1 to 2^31",
                   h->path, key, (long long)f.i);
    return -1;
  }
  *v = f.i;
  return 0;
}

/* A number field in (0, 1]: as get_int. */
static int get_fraction(hf *h, const char *key, double *v) {
  field f;
  if (get(h, key, &f)) return -1;
  if (!f.type[0]) return 1;
  if (strcmp(f.type, "integer") && strcmp(f.type, "real")) {
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is %s, not a number", h->path, key,
                   describe(f.type));
    return -1;
  }
  if (!(f.d > 0 && f.d <= 1)) {
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is %s: give a fraction in (0, 1]",
                   h->path, key, f.s);
    return -1;
  }
  *v = f.d;
  return 0;
}

/* A string field: as get_int; out is "" when absent. */
static int get_string(hf *h, const char *key, char *out, size_t n) {
  field f;
  if (get(h, key, &f)) return -1;
  out[0] = 0;
  if (!f.type[0]) return 1;
  if (strcmp(f.type, "text")) {
    scree__set_why(h->why, h->why_size, "%s: \"%s\" is %s, not a string", h->path, key,
                   describe(f.type));
    return -1;
  }
  snprintf(out, n, "%s", f.s);
  return 0;
}

/* The object at h->obj gives each key once (json_extract would read the
 * first of two silently). */
static int check_duplicates(hf *h) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(h->db, "SELECT key, count(*) FROM json_each(?1, ?2) GROUP BY key "
                                "HAVING count(*) > 1 LIMIT 1", -1, &st, NULL) != SQLITE_OK)
    return sql_failed(h);
  sqlite3_bind_text(st, 1, h->json, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, h->obj, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    scree__set_why(h->why, h->why_size, "%s: \"%.64s\" is given %d times%s", h->path,
                   (const char *)sqlite3_column_text(st, 0), sqlite3_column_int(st, 1),
                   strcmp(h->obj, "$") ? " in \"text_config\"" : "");
  else if (rc != SQLITE_DONE)
    sql_failed(h);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* The top level is an object; the fields are read from it, or from its
 * "text_config" object when it has no hidden_size. */
static int pick_object(hf *h) {
  field f;
  snprintf(h->obj, sizeof h->obj, "$");
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(h->db, "SELECT json_type(?1)", -1, &st, NULL) != SQLITE_OK)
    return sql_failed(h);
  sqlite3_bind_text(st, 1, h->json, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(st);
  const char *t = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  snprintf(f.type, sizeof f.type, "%s", t ? t : "");
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) return sql_failed(h);
  if (strcmp(f.type, "object")) {
    scree__set_why(h->why, h->why_size, "%s: the file holds %s, not a config object {...}",
                   h->path, describe(f.type));
    return -1;
  }
  if (check_duplicates(h) || get(h, "hidden_size", &f)) return -1;
  if (f.type[0]) return 0;
  if (get(h, "text_config", &f)) return -1;
  if (!f.type[0]) return 0; /* hidden_size is then reported missing */
  if (strcmp(f.type, "object")) {
    scree__set_why(h->why, h->why_size, "%s: \"text_config\" is %s, not an object", h->path,
                   describe(f.type));
    return -1;
  }
  snprintf(h->obj, sizeof h->obj, "$.text_config");
  return check_duplicates(h);
}

/* The sizes read from a config. */
typedef struct hf_model {
  const hf_arch *arch;
  char type[64], act[64];
  sqlite3_int64 hidden, heads, kv_heads, head_dim, inter, vocab, rotary_dim;
  int swiglu;
  int text_config; /* read from "text_config" */
} hf_model;

static int read_model(hf *h, hf_model *m) {
  memset(m, 0, sizeof *m);
  if (pick_object(h)) return -1;
  m->text_config = strcmp(h->obj, "$") != 0;
  const int r = get_string(h, "model_type", m->type, sizeof m->type);
  if (r < 0) return -1;
  if (r) {
    scree__set_why(h->why, h->why_size, "%s: \"model_type\" is missing (a required field)",
                   h->path);
    return -1;
  }
  for (size_t k = 0; k < NARCHS; k++)
    if (!strcmp(m->type, ARCHS[k].type)) m->arch = &ARCHS[k];
  if (!m->arch) {
    char known[256] = "";
    for (size_t k = 0; k < NARCHS; k++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
               ARCHS[k].type);
    scree__set_why(h->why, h->why_size, "%s: model_type \"%s\" is not supported (%s)", h->path,
                   m->type, known);
    return -1;
  }
  if (get_int(h, "hidden_size", 1, &m->hidden) || get_int(h, "num_attention_heads", 1, &m->heads) ||
      get_int(h, "vocab_size", 1, &m->vocab))
    return -1;
  int g = get_int(h, "num_key_value_heads", 0, &m->kv_heads);
  if (g < 0) return -1;
  if (g) m->kv_heads = m->heads;
  if (m->heads % m->kv_heads) {
    scree__set_why(h->why, h->why_size,
                   "%s: num_key_value_heads %lld does not divide num_attention_heads %lld",
                   h->path, (long long)m->kv_heads, (long long)m->heads);
    return -1;
  }
  if ((g = get_int(h, "head_dim", 0, &m->head_dim)) < 0) return -1;
  if (g) {
    if (m->hidden % m->heads) {
      scree__set_why(h->why, h->why_size,
                     "%s: num_attention_heads %lld does not divide hidden_size %lld (and no "
                     "head_dim is given)", h->path, (long long)m->heads, (long long)m->hidden);
      return -1;
    }
    m->head_dim = m->hidden / m->heads;
  }
  /* The rotary dimensions: rotary_dim, else a fraction of the head. */
  if ((g = get_int(h, "rotary_dim", 0, &m->rotary_dim)) < 0) return -1;
  if (g) {
    double f = m->arch->rotary;
    const char *from = "partial_rotary_factor";
    if ((g = get_fraction(h, from, &f)) < 0) return -1;
    if (g && (g = get_fraction(h, from = "rotary_pct", &f)) < 0) return -1;
    m->rotary_dim = (sqlite3_int64)((double)m->head_dim * f);
  }
  if (m->rotary_dim > m->head_dim || m->rotary_dim % 2 || m->rotary_dim < 2) {
    scree__set_why(h->why, h->why_size,
                   "%s: rotary dimensions %lld: RoPE needs an even number from 2 to head_dim "
                   "%lld", h->path, (long long)m->rotary_dim, (long long)m->head_dim);
    return -1;
  }
  /* The MLP: SwiGLU for a gated one with silu; scree has no other. */
  if ((g = get_string(h, "hidden_act", m->act, sizeof m->act)) < 0) return -1;
  if (g && (g = get_string(h, "hidden_activation", m->act, sizeof m->act)) < 0) return -1;
  if (g) snprintf(m->act, sizeof m->act, "%s", m->arch->gated ? "silu" : "gelu");
  /* The name goes into the preset's description: a name, nothing else. */
  for (const char *c = m->act; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_' || *c == '-' || *c == '.')) {
      scree__set_why(h->why, h->why_size,
                     "%s: the MLP's activation is not a name (letters, digits, _ - .)", h->path);
      return -1;
    }
  m->swiglu = m->arch->gated && (!strcmp(m->act, "silu") || !strcmp(m->act, "swish"));
  if (m->swiglu && get_int(h, "intermediate_size", 1, &m->inter)) return -1;
  return 0;
}

/* The preset text of m: llama-3-8b's lines and variables (presets/models.txt),
 * with m's sizes. */
static int preset_text(const hf_model *m, char *out, size_t n) {
  size_t k = 0;
#define PUT(...) k += (size_t)snprintf(out + k, k < n ? n - k : 0, __VA_ARGS__)
  PUT("let T = 1..16384\nlet L = 1024,4096,8192\nlet B = 16384,65536\n");
  PUT("model hf-config -- %s%s (%s): hidden %lld, %lld query / %lld KV heads of %lld, RoPE on "
      "%lld, ", m->type, m->text_config ? " in text_config" : "",
      m->arch->rmsnorm ? "RMSNorm" : "LayerNorm", (long long)m->hidden, (long long)m->heads,
      (long long)m->kv_heads, (long long)m->head_dim, (long long)m->rotary_dim);
  if (m->swiglu)
    PUT("SwiGLU %lld", (long long)m->inter);
  else
    PUT("%s %s MLP: no scree op, not tuned", m->arch->gated ? "gated" : "ungated", m->act);
  PUT(", vocabulary %lld\n", (long long)m->vocab);
  if (m->arch->rmsnorm) {
    PUT("rmsnorm rows={T},cols=%lld\n", (long long)m->hidden);
    PUT("add_rmsnorm rows={T},cols=%lld\n", (long long)m->hidden);
  } else {
    PUT("layernorm rows={T},cols=%lld\n", (long long)m->hidden);
  }
  PUT("rope total={T},batch=1,max_position=0,heads_q=%lld,heads_kv=%lld,head_dim=%lld,"
      "rotary_dim=%lld\n", (long long)m->heads, (long long)m->kv_heads, (long long)m->head_dim,
      (long long)m->rotary_dim);
  if (m->swiglu) PUT("swiglu rows={T},cols=%lld,gate_stride=0,up_stride=0\n", (long long)m->inter);
  PUT("cross_entropy rows={T},vocab=%lld\n", (long long)m->vocab);
  PUT("attention batch={B/L},total_q={B},total_k={B},max_seqlen_q={L},max_seqlen_k={L},"
      "heads_q=%lld,heads_kv=%lld,head_dim=%lld,window_left=-1,window_right=-1 "
      "variant=dtype={dtype},head_dim=%lld,causal=1,window=0 dtypes=fp16,bf16\n",
      (long long)m->heads, (long long)m->kv_heads, (long long)m->head_dim,
      (long long)m->head_dim);
#undef PUT
  return k < n ? 0 : -1;
}

scree_status scree__hf_config_preset(const char *path, scree__presets *out, char *why,
                                     size_t why_size) {
  memset(out, 0, sizeof *out);
  char err[1024];
  char *text = scree__read_text(path, err, sizeof err);
  if (!text) {
    scree__set_why(why, why_size, "cannot read %s", err);
    return SCREE_ERROR_IO;
  }
  hf h = {NULL, text, path, "$", why, why_size};
  scree_status st = SCREE_ERROR_PARSE;
  if (sqlite3_open_v2(":memory:", &h.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
      SQLITE_OK) {
    scree__set_why(why, why_size, "SQLite: %s", h.db ? sqlite3_errmsg(h.db) : "out of memory");
    st = SCREE_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  sqlite3_stmt *v;
  if (sqlite3_prepare_v2(h.db, "SELECT json_valid(?1)", -1, &v, NULL) != SQLITE_OK) {
    sql_failed(&h);
    goto done;
  }
  sqlite3_bind_text(v, 1, text, -1, SQLITE_STATIC);
  const int valid = sqlite3_step(v) == SQLITE_ROW && sqlite3_column_int(v, 0) == 1;
  sqlite3_finalize(v);
  if (!valid) {
    scree__json_syntax_error(text, err, sizeof err);
    scree__set_why(why, why_size, "%s: %s", path, err);
    goto done;
  }
  hf_model m;
  if (read_model(&h, &m)) goto done;
  char preset[4096];
  if (preset_text(&m, preset, sizeof preset)) {
    scree__set_why(why, why_size, "%s: the preset text is too long", path);
    goto done;
  }
  st = scree__presets_parse(preset, path, out, err, sizeof err);
  if (st) scree__set_why(why, why_size, "%s (the preset of %s)", err, m.type);
done:
  sqlite3_close(h.db);
  free(text);
  return st;
}
