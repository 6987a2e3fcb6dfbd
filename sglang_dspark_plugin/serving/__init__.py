"""The serving plan, sglang-free: ``make_plan(LaunchRequest, SglangSupport) -> ServePlan`` decides
what a ``DSPARK_HARVEST`` launch serves, once; the sglang adapters (``sglang_plugin``) only translate
sglang's arguments into a request and the plan back into sglang's arguments and workers.

``layout`` holds the arms (builtin, query layout, parent worker), ``refusal`` what a refusal is (each
check lives beside what it checks), ``plan`` the request, the support record, the plan and the
function that makes it.
"""

from .layout import DFLASH, DSPARK, MASK_FILL, MASK_FILL_DSPARK, SHIFTED, Arm, layout_for
from .plan import MANIFEST_ENV_VAR, LaunchRequest, ServePlan, SglangSupport, make_plan
from .refusal import ALGORITHM, ServeRefusal

__all__ = [
    "ALGORITHM",
    "DFLASH",
    "DSPARK",
    "MANIFEST_ENV_VAR",
    "MASK_FILL",
    "MASK_FILL_DSPARK",
    "SHIFTED",
    "Arm",
    "LaunchRequest",
    "ServePlan",
    "ServeRefusal",
    "SglangSupport",
    "layout_for",
    "make_plan",
]
