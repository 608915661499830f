#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/corpus.jsonl: >= 2,000 varied lines (one JSON
string each, ASCII-escaped) for tokenizer parity tests. Deterministic (seeded).

Usage: scripts/gen-tokenizer-corpus.py [OUT]"""
import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/tokenizer/corpus.jsonl"

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "I'm sure they'll say we've done what we'd planned; you're right, it isn't.",
    "SHE'S GONE. THEY'LL COME BACK, WON'T THEY? I'D THINK SO.",
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse...",
    "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
    "“Quotes,” ‘single quotes’, «guillemets», and „low quotes“ are all punctuation.",
    "Mr. O'Neil's dog—a 3-year-old beagle—ate 2.5 kg of food (approx.) in 1 week!",
    "Fast inference is mostly about moving bytes: 1.2 GB per token at 4.8 TB/s is 0.25 ms.",
    "e.g., i.e., etc., vs. — abbreviations and em-dashes – en-dashes.",
    "Hello, world! How are you today? Fine, thanks.",
    "A sentence with    four spaces, and a tab\there, then a newline\nand another.",
]
CHINESE = ["你好，世界！今天天气很好。", "机器学习是人工智能的一个分支。", "我们在2024年发布了新的模型，速度提高了3倍。",
           "《红楼梦》是中国古典四大名著之一。", "请问，去火车站怎么走？", "繁體中文與简体中文混合使用。"]
JAPANESE = ["こんにちは、世界！", "東京は日本の首都です。カタカナ、ひらがな、漢字。", "ｶﾀｶﾅ半角とカタカナ全角。",
            "吾輩は猫である。名前はまだ無い。", "ラーメンを食べたい！！！"]
KOREAN = ["안녕하세요, 세계!", "한국어 문장은 띄어쓰기를 사용합니다.", "서울은 대한민국의 수도입니다. 2,000만 명",
          "ㅋㅋㅋ ㅎㅎ ᄀᄁᄂ"]
ARABIC = ["مرحبا بالعالم", "اللغة العربية تكتب من اليمين إلى اليسار.", "الرقم ١٢٣٤٥ بالأرقام العربية الهندية",
          "السَّلَامُ عَلَيْكُمْ"]
OTHER = ["Привет, мир! Как дела?", "Γειά σου Κόσμε· ΑΒΓΔ αβγδ", "שלום עולם", "नमस्ते दुनिया, यह हिंदी है।",
         "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรค", "Xin chào thế giới! Tiếng Việt có nhiều dấu.",
         "Zażółć gęślą jaźń. Straße, Ärger, Öl, Übel.", "ქართული ენა", "Հայերեն", "አማርኛ ቋንቋ",
         "ᚠᚢᚦᚨᚱᚲ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒜𝒷𝒸", "𓀀𓀁𓀂 hieroglyphs", "Ελληνικά και English mixed"]
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏽‍💻", "🧑🏿‍🤝‍🧑🏻", "❤️", "1️⃣", "🇫🇷🇯🇵🇺🇸", "😀😃😄😁",
         "🤖 robots", "🫠🫡🫶", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁‍🗨", "🙇‍♀️", "✌🏻✌🏼✌🏽✌🏾✌🏿"]
COMBINING = ["e\u0301", "Cafe\u0301 vs Café", "n\u0303", "a\u0300\u0301\u0302\u0303\u0304",
             "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0353\u0341l\u0358g\u0350o",
             "\u1100\u1161\u11a8 (decomposed Hangul)", "ﬁ ﬂ ﬃ ligatures", "Å Å Å (angstrom, A+ring, precomposed)",
             "ǅ ǈ ǋ titlecase digraphs", "İstanbul ıi ſ K Ω"]
SPACES = ["\t", "\r\n", "\n\n\n", "   ", " \t \n ", "a\r\nb\r\nc", "line1\nline2\n", "\u00a0nbsp\u00a0", "\u3000ideographic",
          "\u2028line sep\u2029para sep", "\u0085next line", "\u180emongolian", "\u200bzero\u200dwidth\u200c",
          "\ufeffBOM", " " * 17, "\t" * 9, "\n" * 5 + " x", "trailing spaces   ", "   leading spaces",
          "x" + " " * 64 + "y", "\x0b\x0c vertical tab form feed", "\x1c\x1d\x1e\x1f separators"]
NUMBERS = ["0", "42", "-17", "3.14159", "1,000,000", "1e10", "6.022e23", "0x1F", "0b1010", "12345678901234567890",
           "v1.2.3", "2024-11-29T20:32:00Z", "+1 (555) 123-4567", "¹²³ ⁴⁵", "①②③", "١٢٣ ۴۵۶", "１２３４",
           "Ⅻ Ⅳ ⅸ", "½ ¾ ⅓", "99.9%", "$1,234.56", "€5", "¥100", "₹500", "3/4", "10:30pm", "#1", "9am-5pm"]
CODE = [
    "def f(x):\n    return x ** 2  # square",
    "for (int i = 0; i < n; i++) { sum += a[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const x = () => { console.log(`hi ${name}`); };",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "SELECT * FROM users WHERE id = 1 AND name LIKE '%bob%';",
    "if [ -f \"$FILE\" ]; then echo ok; fi",
    "x = [i for i in range(10) if i % 2 == 0]",
    "fn main() { let v: Vec<i32> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "    indented\n\t\ttabbed\n        deeper",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&&n||o",
    "// comment\n/* block */\n# hash\n-- sql",
    "@decorator\nclass A(B, metaclass=M):\n    pass",
    "regex: ^[a-zA-Z0-9_.+-]+@[a-zA-Z0-9-]+\\.[a-zA-Z0-9-.]+$",
]
URLS = ["https://example.com/path?query=1&b=2#frag", "http://localhost:8080/v1/chat/completions",
        "ftp://files.example.org/pub/file.tar.gz", "mailto:someone@example.com", "user.name+tag@sub.domain.co.uk",
        "https://zh.wikipedia.org/wiki/中文", "www.github.com/huggingface/tokenizers", "C:\\Users\\name\\file.txt",
        "/usr/local/lib/python3.11/site-packages", "git@github.com:org/repo.git"]
SPECIAL_LIKE = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
                "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", "<|im_start", "im_end|>", "<||>", "<|>",
                "<|im_start|><|im_start|>", "text<|im_end|>text", " <|im_end|> ", "<repo_name>", "<file_sep>",
                "<|begin_of_text|>", "<s>", "</s>", "<unk>", "[INST] hi [/INST]", "<think>\n</think>",
                "<|endoftext|><|endoftext|>", "<|IM_START|>", "< |im_start| >", "<jupyter_code>print(1)"]
ODD = ["\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\ue000\uf8ff private use", "\uffff\ufffe noncharacters",
       "\U0010ffff", "\ufffd replacement char", "\u202eright-to-left override\u202c", "\u0000\u0000",
       "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "don'T", "''''", "'", "\"", "...", "!!!???",
       "____", "----", "====", "****", "~~~~", "````", "@@@", "&&&", "|||", "\\\\\\", "/ / /", ""]

POOLS = [ENGLISH, CHINESE, JAPANESE, KOREAN, ARABIC, OTHER, EMOJI, COMBINING, SPACES, NUMBERS, CODE, URLS,
         SPECIAL_LIKE, ODD]
RANGES = [(0x20, 0x7e), (0xa0, 0x17f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff),
          (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f), (0x2190, 0x23ff), (0x3000, 0x30ff),
          (0x4e00, 0x4fff), (0xac00, 0xad00), (0xff00, 0xffef), (0x1f300, 0x1f6ff), (0x1f900, 0x1f9ff),
          (0x10000, 0x1007f), (0x1d400, 0x1d7ff), (0xe0000, 0xe007f)]


def random_chars(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def main():
    rng = random.Random(20261129)
    lines = []
    for pool in POOLS:
        lines.extend(pool)
    # Mixtures of pieces from different pools, joined by varied separators.
    seps = [" ", "", "\n", "\t", "  ", "\r\n", ", ", " — "]
    while len(lines) < 1500:
        k = rng.randint(1, 5)
        parts = [rng.choice(rng.choice(POOLS)) for _ in range(k)]
        lines.append(rng.choice(seps).join(parts))
    # Random code points from many scripts, and random ASCII punctuation/digit soup.
    while len(lines) < 1800:
        lines.append(random_chars(rng, rng.randint(1, 40)))
    soup = "abcXYZ0123456789 .,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`\t\n"
    while len(lines) < 2000:
        lines.append("".join(rng.choice(soup) for _ in range(rng.randint(1, 60))))
    # A few long lines (merge loop on long words, long whitespace runs).
    lines.append("a" * 3000)
    lines.append(" " * 2000 + "end")
    lines.append("".join(rng.choice(ENGLISH) + " " for _ in range(40)))
    lines.append("".join(rng.choice(CHINESE) for _ in range(40)))
    lines.append("9" * 1000)
    lines.append("👍🏽" * 200)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="ascii") as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")
    print(f"{OUT}: {len(lines)} lines")


if __name__ == "__main__":
    main()
