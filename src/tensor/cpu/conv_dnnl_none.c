/* cpu/conv_dnnl_none.c: the oneDNN path's entry points (cpu/conv_impl.h)
 * in a build without oneDNN (IABN_HAVE_DNNL 0): the cache is an empty
 * object, iabn_conv_have_dnnl() is 0 so the rule sends no convolution
 * there, and a direct call is an error that says why.  A build with oneDNN
 * has them in cpu/conv_dnnl.c. */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <stdlib.h>

int iabn_conv_have_dnnl(void) { return IABN_HAVE_DNNL; }

#if !IABN_HAVE_DNNL

struct iabn_conv_cache {
    int plans;
};

static int no_dnnl(iabn_err *e)
{
    return iabn_err_set(e, IABN_EINVAL, "this build of iabn has no oneDNN (libdnnl-dev was "
                                        "not found when it was configured)");
}

int iabn_conv_cache_new(iabn_conv_cache **out, iabn_err *e)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory for the convolution cache");
}
void iabn_conv_cache_free(iabn_conv_cache *c) { free(c); }
int iabn_conv_cache_size(const iabn_conv_cache *c) { return c ? c->plans : 0; }

int iabn_conv_dnnl_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int bias, int threads,
                           size_t *bytes, const char **impl, iabn_err *e)
{
    return no_dnnl(e);
}
int iabn_conv_dnnl_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, const float *r, float *y,
                       void *scratch, size_t scratch_bytes, iabn_err *e)
{
    return no_dnnl(e);
}
int iabn_conv_dnnl_blocked(const iabn_conv_geom *g, int y_side, iabn_layout blocked) { return 0; }
int iabn_conv_dnnl_add_fused(const iabn_conv_geom *g) { return 0; }
int iabn_conv_dnnl_winograd(const iabn_conv_geom *g, iabn_conv_pass pass) { return 0; }
int iabn_conv_dnnl_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *scratch, size_t scratch_bytes,
                            iabn_err *e)
{
    return no_dnnl(e);
}
int iabn_conv_dnnl_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *scratch,
                              size_t scratch_bytes, iabn_err *e)
{
    return no_dnnl(e);
}

#endif
