"""The paper recipe's training augmentation on whole batches on the run's device (`train.augment_on: device`):

    JPEG bytes --decode (batched: nvJPEG on a GPU)--> random-resized crop + resize (antialiased) --> flip
      --> RandAugment (timm's policy string, ops applied per image, batched by op) --> normalise
      --> random erasing (timm's RandomErasing on the batch)          [mixup / CutMix: engine/recipe.SoftTargets]

Why by hand: timm and torchvision transform one PIL image (or one tensor with one set of parameters) at a time
in loader processes; at the planned GPU rates that needs 12-34 CPU cores per GPU (docs/data.md). DALI does this
on the GPU but does not run on the CPU (so neither in the tests nor at the CPU scale) and its RandAugment differs
from timm's. Here every random number is drawn up front from one CPU generator seeded by (seed, epoch, batch,
rank), then the ops run as tensor code on the device, so a batch is the same on any device and any number of
loader processes, and a resumed run replays it.

The policy is timm's: `rand_augment_transform` parses the string (ops, layers, probability, magnitude, its noise
and bound) and the magnitude-to-argument mapping is timm's (tests/test_device_augment.py checks both against
timm). Where the pixels differ from timm's PIL path (docs/data.md "Device augmentation"):
- resampling: torch's antialiased bicubic (a = -0.75) against PIL's (a = -0.5), and grid_sample's bicubic
  without antialiasing for the RandAugment geometry, at pixel centres as PIL; a few grey levels on edges;
- random-resized crop: the same distribution as torchvision's (area in `crop_scale`, log aspect uniform in
  log(3/4, 4/3), 10 tries, then the centre crop of the clamped aspect);
- random erasing and mixup/CutMix are timm's own code on the batch.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

LEVEL_DENOM = 10.0
LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))
GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")
SIGNED = GEOMETRIC + ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")
SUPPORTED = SIGNED + ("AutoContrast", "Equalize", "Invert", "Posterize", "PosterizeIncreasing", "PosterizeOriginal",
                      "Solarize", "SolarizeIncreasing", "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness")


def level_value(name: str, m: float, hparams: dict) -> float:
    """timm's argument of op `name` at magnitude m, before the random sign of the SIGNED ops."""
    r = m / LEVEL_DENOM
    if name == "Rotate":
        return r * 30.0
    if name in ("ShearX", "ShearY"):
        return r * 0.3
    if name in ("TranslateXRel", "TranslateYRel"):
        return r * hparams.get("translate_pct", 0.45)
    if name in ("TranslateX", "TranslateY"):
        return r * float(hparams.get("translate_const", 250))
    if name == "Posterize":
        return float(int(r * 4))
    if name == "PosterizeIncreasing":
        return float(4 - int(r * 4))
    if name == "PosterizeOriginal":
        return float(int(r * 4) + 4)
    if name == "Solarize":
        return float(min(256, int(r * 256)))
    if name == "SolarizeIncreasing":
        return float(256 - min(256, int(r * 256)))
    if name == "SolarizeAdd":
        return float(min(128, int(r * 110)))
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return r * 1.8 + 0.1
    if name.endswith("Increasing"):  # the enhance ops: 1 +- r * 0.9, at least 0.1 (sign applied by the caller)
        return r * 0.9
    return 0.0


@dataclass(frozen=True)
class Policy:
    """A RandAugment policy as timm parses it."""
    names: tuple
    weights: tuple | None
    layers: int
    prob: float
    magnitude: float
    magnitude_std: float
    magnitude_max: float
    hparams: dict

    @classmethod
    def parse(cls, spec: str, hparams: dict) -> "Policy":
        from timm.data.auto_augment import rand_augment_transform

        from itervision.errors import UserError

        ra = rand_augment_transform(spec, dict(hparams))
        names = tuple(op.name for op in ra.ops)
        unsupported = [n for n in names if n not in SUPPORTED]
        if unsupported:
            raise UserError(f"RandAugment op {unsupported[0]} of train.randaugment '{spec}' has no device version; "
                            f"use train.augment_on: host, or a policy of {', '.join(SUPPORTED)}")
        op = ra.ops[0]
        weights = None if ra.choice_weights is None else tuple(float(w) for w in ra.choice_weights)
        return cls(names, weights, ra.num_layers, op.prob, float(op.magnitude), float(op.magnitude_std),
                   float(op.magnitude_max or LEVEL_DENOM), dict(op.hparams))

    def draw(self, gen: torch.Generator, n: int) -> list[dict]:
        """Per layer: op index, applied?, magnitude, sign (-1 / 1) of every image, as timm draws them."""
        layers = []
        for _ in range(self.layers):
            if self.weights is None:
                op = torch.randint(len(self.names), (n,), generator=gen)
            else:
                op = torch.multinomial(torch.tensor(self.weights).expand(n, -1), 1, generator=gen)[:, 0]
            applied = torch.rand(n, generator=gen) <= self.prob
            m = torch.full((n,), self.magnitude)
            if self.magnitude_std == float("inf"):
                m = torch.rand(n, generator=gen) * self.magnitude
            elif self.magnitude_std > 0:
                m = m + torch.randn(n, generator=gen) * self.magnitude_std
            m = m.clamp(0, self.magnitude_max)
            sign = torch.where(torch.rand(n, generator=gen) > 0.5, -1.0, 1.0)
            layers.append({"op": op, "applied": applied, "magnitude": m, "sign": sign})
        return layers


# ------------------------------------------------------------------------------------------ the ops
# Every op takes float images (N, C, H, W) holding integer grey levels 0..255 and returns the same, rounded as a
# uint8 PIL image would be stored; `v` holds one argument per image.

def _gray(x: torch.Tensor) -> torch.Tensor:
    """PIL's L conversion (ITU-R 601-2 luma, fixed point), keeping the channel count."""
    if x.shape[1] == 1:
        return x
    luma = torch.floor((x[:, 0] * 19595 + x[:, 1] * 38470 + x[:, 2] * 7471 + 32768) / 65536)
    return luma[:, None].expand_as(x)


def _blend(degenerate: torch.Tensor, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """PIL's Image.blend as ImageEnhance uses it: degenerate + f (x - degenerate), clipped, truncated."""
    return torch.floor((degenerate + f.view(-1, 1, 1, 1) * (x - degenerate)).clamp(0, 255))


def _smooth(x: torch.Tensor) -> torch.Tensor:
    """PIL's SMOOTH filter (3 x 3, centre 5, sum 13, rounded); the one-pixel border stays as it was."""
    C = x.shape[1]
    k = torch.ones(C, 1, 3, 3, dtype=x.dtype, device=x.device)
    k[:, :, 1, 1] = 5
    inner = torch.floor(F.conv2d(x, k, groups=C) / 13 + 0.5)
    out = x.clone()
    out[:, :, 1:-1, 1:-1] = inner
    return out


def autocontrast(x, v=None):
    lo = x.amin((2, 3), keepdim=True)
    hi = x.amax((2, 3), keepdim=True)
    scale = 255.0 / (hi - lo).clamp(min=1)
    out = torch.floor((x - lo) * scale).clamp(0, 255)
    return torch.where(hi > lo, out, x)


def equalize(x, v=None):
    """PIL's ImageOps.equalize per image and channel: the histogram's lookup table."""
    N, C, H, W = x.shape
    flat = x.reshape(N * C, H * W).long()
    hist = torch.zeros(N * C, 256, dtype=torch.long, device=x.device).scatter_add_(1, flat, torch.ones_like(flat))
    last = torch.where(hist > 0, torch.arange(256, device=x.device), -1).amax(1)  # the last level present
    step = (H * W - hist.gather(1, last[:, None])[:, 0]) // 255
    before = torch.cumsum(hist, 1) - hist  # images below each level
    lut = ((step // 2)[:, None] + before) // step.clamp(min=1)[:, None]
    lut = torch.where(step[:, None] > 0, lut.clamp(0, 255), torch.arange(256, device=x.device))
    return lut.gather(1, flat).reshape(N, C, H, W).to(x.dtype)


def invert(x, v=None):
    return 255 - x


def posterize(x, bits):
    shift = (8 - bits.clamp(0, 8)).view(-1, 1, 1, 1)
    q = torch.pow(2.0, shift)
    return torch.floor(x / q) * q


def solarize(x, threshold):
    return torch.where(x < threshold.view(-1, 1, 1, 1), x, 255 - x)


def solarize_add(x, add):
    return torch.where(x < 128, (x + add.view(-1, 1, 1, 1)).clamp(max=255), x)


def color(x, f):
    return _blend(_gray(x), x, f)


def contrast(x, f):
    mean = torch.floor(_gray(x)[:, :1].mean((1, 2, 3), keepdim=True) + 0.5)
    return _blend(mean.expand_as(x), x, f)


def brightness(x, f):
    return _blend(torch.zeros_like(x), x, f)


def sharpness(x, f):
    return _blend(_smooth(x), x, f)


COLOR_OPS = {"AutoContrast": autocontrast, "Equalize": equalize, "Invert": invert, "Posterize": posterize,
             "PosterizeIncreasing": posterize, "PosterizeOriginal": posterize, "Solarize": solarize,
             "SolarizeIncreasing": solarize, "SolarizeAdd": solarize_add}
ENHANCE_OPS = {"Color": color, "Contrast": contrast, "Brightness": brightness, "Sharpness": sharpness}


def affine_matrix(name: str, v: torch.Tensor, W: int, H: int) -> torch.Tensor:
    """(N, 2, 3) maps from output to input pixel coordinates (PIL's AFFINE data) of a geometric op."""
    n = len(v)
    m = torch.zeros(n, 2, 3, dtype=torch.float64)
    m[:, 0, 0] = m[:, 1, 1] = 1
    if name == "Rotate":  # PIL's Image.rotate: counter-clockwise about the centre
        a = -torch.deg2rad(v.double())
        cos, sin = torch.cos(a), torch.sin(a)
        cx, cy = W / 2.0, H / 2.0
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, sin, -sin, cos
        m[:, 0, 2] = cos * -cx + sin * -cy + cx
        m[:, 1, 2] = -sin * -cx + cos * -cy + cy
    elif name == "ShearX":
        m[:, 0, 1] = v
    elif name == "ShearY":
        m[:, 1, 0] = v
    elif name == "TranslateXRel":
        m[:, 0, 2] = v * W
    elif name == "TranslateYRel":
        m[:, 1, 2] = v * H
    elif name == "TranslateX":
        m[:, 0, 2] = v
    elif name == "TranslateY":
        m[:, 1, 2] = v
    return m


def warp(x: torch.Tensor, pixel_maps: torch.Tensor, fill: torch.Tensor, mode: str) -> torch.Tensor:
    """Apply per-image affine maps (output -> input pixel coordinates, sampled at pixel centres as PIL does), with
    `fill` outside the image."""
    N, C, H, W = x.shape
    a, b, c = pixel_maps[:, 0, 0], pixel_maps[:, 0, 1], pixel_maps[:, 0, 2]
    d, e, f = pixel_maps[:, 1, 0], pixel_maps[:, 1, 1], pixel_maps[:, 1, 2]
    theta = torch.stack([torch.stack([a, b * H / W, a + b * H / W + 2 * c / W - 1], 1),
                         torch.stack([d * W / H, e, d * W / H + e + 2 * f / H - 1], 1)], 1)
    grid = F.affine_grid(theta.to(x.device, x.dtype), [N, C, H, W], align_corners=False)
    ones = torch.ones(N, 1, H, W, dtype=x.dtype, device=x.device)
    out = F.grid_sample(torch.cat([x, ones], 1), grid, mode=mode, padding_mode="zeros", align_corners=False)
    inside = out[:, -1:].clamp(0, 1)
    return torch.round((out[:, :-1] + (1 - inside) * fill.view(1, -1, 1, 1)).clamp(0, 255))


def apply_op(name: str, x: torch.Tensor, value: torch.Tensor, hparams: dict) -> torch.Tensor:
    """Op `name` with per-image arguments `value` (already signed) on images x (grey levels 0..255)."""
    if name in GEOMETRIC:
        mode = "bilinear" if str(hparams.get("interpolation", "bicubic")).lower().endswith("bilinear") else "bicubic"
        fill = torch.tensor(hparams.get("img_mean", (128,) * x.shape[1])[: x.shape[1]], dtype=x.dtype,
                            device=x.device)
        return warp(x, affine_matrix(name, value, x.shape[3], x.shape[2]), fill, mode)
    if name in COLOR_OPS:
        return COLOR_OPS[name](x, value.to(x.device, x.dtype))
    base = name.replace("Increasing", "")
    factor = value.to(x.device, x.dtype)
    if name.endswith("Increasing"):  # 1 +- level, at least 0.1 (value carries the sign)
        factor = (1 + factor).clamp(min=0.1)
    return ENHANCE_OPS[base](x, factor)


def rand_augment(x: torch.Tensor, policy: Policy, gen: torch.Generator) -> torch.Tensor:
    """RandAugment of a batch: per layer, every image's op (with its probability, magnitude and sign) drawn from
    `gen`, then each op applied once to the images that drew it."""
    for layer in policy.draw(gen, len(x)):
        for k, name in enumerate(policy.names):
            chosen = (layer["op"] == k) & layer["applied"]
            if not chosen.any():
                continue
            idx = chosen.nonzero()[:, 0]
            value = torch.tensor([level_value(name, float(m), policy.hparams) for m in layer["magnitude"][idx]])
            if name in SIGNED:
                value = value * layer["sign"][idx]
            dev_idx = idx.to(x.device)
            x = x.index_copy(0, dev_idx, apply_op(name, x.index_select(0, dev_idx), value, policy.hparams))
    return x


# ------------------------------------------------------------------------------------------ crop and resize

def crop_boxes(gen: torch.Generator, sizes: torch.Tensor, scale: tuple, tries: int = 10) -> torch.Tensor:
    """(N, 4) crops (top, left, height, width) of torchvision's RandomResizedCrop for images of `sizes` (N, 2) =
    (height, width): area uniform in `scale`, log aspect uniform in log(3/4, 4/3), the first of `tries` that fits,
    else the centre crop of the aspect clamped to that range."""
    H, W = sizes[:, 0:1].double(), sizes[:, 1:2].double()
    n = len(sizes)
    area = H * W * (torch.rand(n, tries, generator=gen, dtype=torch.float64) * (scale[1] - scale[0]) + scale[0])
    ratio = torch.exp(torch.rand(n, tries, generator=gen, dtype=torch.float64) * (LOG_RATIO[1] - LOG_RATIO[0])
                      + LOG_RATIO[0])
    w, h = torch.round(torch.sqrt(area * ratio)), torch.round(torch.sqrt(area / ratio))
    u_top, u_left = torch.rand(n, tries, generator=gen, dtype=torch.float64), torch.rand(n, tries, generator=gen,
                                                                                           dtype=torch.float64)
    fits = (w > 0) & (h > 0) & (w <= W) & (h <= H)
    first = fits.double().argmax(1, keepdim=True)
    pick = lambda t: t.gather(1, first)[:, 0]  # noqa: E731
    h1, w1 = pick(h), pick(w)
    top = torch.floor(pick(u_top) * (H[:, 0] - h1 + 1))
    left = torch.floor(pick(u_left) * (W[:, 0] - w1 + 1))
    # fallback: the whole image, its aspect clamped to [3/4, 4/3], centred
    in_ratio = W[:, 0] / H[:, 0]
    fw = torch.where(in_ratio < 3 / 4, W[:, 0], torch.where(in_ratio > 4 / 3, torch.round(H[:, 0] * 4 / 3), W[:, 0]))
    fh = torch.where(in_ratio < 3 / 4, torch.round(W[:, 0] / (3 / 4)), H[:, 0])
    fh = torch.minimum(fh, H[:, 0])
    any_fit = fits.any(1)
    h1, w1 = torch.where(any_fit, h1, fh), torch.where(any_fit, w1, fw)
    top = torch.where(any_fit, top, torch.floor((H[:, 0] - h1) / 2))
    left = torch.where(any_fit, left, torch.floor((W[:, 0] - w1) / 2))
    return torch.stack([top, left, h1, w1], 1).long()


def crop_resize(images: list, boxes: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    """Crop each (C, H, W) uint8 image to its box and resize it to size x size (antialiased, as PIL resizes);
    float grey levels 0..255, rounded as a uint8 image would be."""
    out = []
    for img, (t, l, h, w) in zip(images, boxes.tolist()):
        crop = img[None, :, t:t + h, l:l + w].float()
        out.append(F.interpolate(crop, size=(size, size), mode=mode, antialias=True, align_corners=False))
    return torch.round(torch.cat(out).clamp(0, 255))


# ------------------------------------------------------------------------------------------ the pipeline

@dataclass
class DeviceAugment:
    """The training augmentation of one run (run_configs.TrainConfig), on batches on `device`."""
    img_size: int
    mean: tuple
    std: tuple
    crop_scale: tuple
    hflip: float
    interpolation: str
    randaugment: str
    random_erasing: float
    device: torch.device

    @classmethod
    def from_train(cls, train, img_size: int, mean, std, device) -> "DeviceAugment":
        return cls(img_size, tuple(mean), tuple(std), tuple(train.crop_scale), train.hflip, train.interpolation,
                   train.randaugment, train.random_erasing, torch.device(device))

    def __post_init__(self):
        # timm's RandAugment hparams for this image size and mean (as timm's create_transform sets them)
        hparams = {"translate_const": int(self.img_size * 0.45),
                   "img_mean": tuple(min(255, round(255 * m)) for m in self.mean),
                   "interpolation": self.interpolation}
        self.policy = Policy.parse(self.randaugment, hparams) if self.randaugment else None
        self._erasing = None
        if self.random_erasing > 0:
            from timm.data.random_erasing import RandomErasing

            self._erasing = RandomErasing(self.random_erasing, mode="pixel", max_count=1, device=str(self.device))

    def __call__(self, images: list, seed: int) -> torch.Tensor:
        """(C, H, W) uint8 images (any sizes; on the device or not) -> normalised float (N, C, S, S) on the device,
        a pure function of `seed` and the images."""
        from itervision.data.loaders import global_seed

        gen = torch.Generator().manual_seed(seed % (2 ** 63 - 1))
        sizes = torch.tensor([[im.shape[-2], im.shape[-1]] for im in images])
        boxes = crop_boxes(gen, sizes, self.crop_scale)
        images = [im.to(self.device, non_blocking=True) for im in images]
        x = crop_resize(images, boxes, self.img_size, self.interpolation)
        flip = (torch.rand(len(images), generator=gen) < self.hflip).to(self.device)
        x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
        if self.policy is not None:
            x = rand_augment(x, self.policy, gen)
        mean = torch.tensor(self.mean, device=self.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=self.device).view(1, -1, 1, 1)
        x = (x / 255 - mean) / std
        if self._erasing is not None:  # timm's, drawing from Python's generator and torch's (seeded here)
            devices = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), global_seed(int(torch.randint(2 ** 31, (1,), generator=gen))):
                torch.manual_seed(int(torch.randint(2 ** 31, (1,), generator=gen)))
                x = self._erasing(x)
        return x


def decode_jpegs(data: list, device: torch.device) -> list:
    """JPEG bytes (1-D uint8 tensors) -> (3, H, W) uint8 images: batched on a GPU (nvJPEG), one by one on the CPU."""
    from torchvision.io import ImageReadMode, decode_jpeg

    from itervision.errors import UserError

    try:
        with warnings.catch_warnings():  # torchvision 0.29 points to TorchCodec; the pinned 0.29.1 decodes as ever
            warnings.simplefilter("ignore", DeprecationWarning)
            if device.type == "cuda":
                return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
            return [decode_jpeg(d, mode=ImageReadMode.RGB) for d in data]
    except RuntimeError as err:
        raise UserError(f"a JPEG of the batch does not decode ({str(err).splitlines()[0][:120]}); regenerate the "
                        f"shards (`dvc repro --force make_subset@DATASET`)") from None
